package itest

// The README's quick start, run as written: its blocks are taken from
// README.md by their <!-- quickstart KIND [PATH] --> markers, so the README
// cannot promise a newcomer what registryd no longer does.
//
//   - "upstream offline": the local upstream (python3 -m http.server),
//     started in the background on a free loopback port;
//   - "daemon offline|online": the line that starts registryd, "[VAR=value ...]
//     make run"; the test starts the built binary with those variables, on
//     kernel-chosen loopback ports and a data dir beside the script;
//   - "script [offline|online]": the commands typed in the other terminal.
//     The offline path runs in order, in one bash with -euo pipefail, and
//     must end with a green mvn build through the new registry. The online
//     path needs the internet, which tests never use: its blocks are only
//     checked by bash -n.
//
// The README's fixed addresses (127.0.0.1:8081, 127.0.0.1:8080, the
// upstream's 127.0.0.1:8000) are replaced by the test's.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quickstartBlock is one marked fenced block of the README.
type quickstartBlock struct {
	kind, path string // path: "", "offline" or "online"
	line       int    // of the opening fence, for messages
	text       string
}

// readQuickstart returns the marked blocks of the README, in order.
func readQuickstart(t *testing.T, readme string) []quickstartBlock {
	t.Helper()
	var blocks []quickstartBlock
	for _, b := range readDocBlocks(t, readme, "quickstart") {
		kind, path := b.args[0], ""
		if len(b.args) > 1 {
			path = b.args[1]
		}
		if kind != "upstream" && kind != "daemon" && kind != "script" {
			t.Fatalf("README.md:%d: unknown quickstart block kind %q", b.line, kind)
		}
		if len(b.args) > 2 || path != "" && path != "offline" && path != "online" {
			t.Fatalf("README.md:%d: unknown quickstart path %q", b.line, strings.Join(b.args[1:], " "))
		}
		blocks = append(blocks, quickstartBlock{kind: kind, path: path, line: b.line, text: b.text})
	}
	return blocks
}

// quickstartPath is what one path of the quick start runs.
type quickstartPath struct {
	upstream []string // background commands
	daemon   []string // the "make run" lines
	script   strings.Builder
}

func collectPath(blocks []quickstartBlock, path string) *quickstartPath {
	p := &quickstartPath{}
	for _, b := range blocks {
		if b.path != "" && b.path != path {
			continue
		}
		switch b.kind {
		case "upstream":
			p.upstream = append(p.upstream, strings.TrimSpace(b.text))
		case "daemon":
			p.daemon = append(p.daemon, strings.TrimSpace(b.text))
		case "script":
			fmt.Fprintf(&p.script, "# README.md, block at line %d\n%s\n", b.line, b.text)
		}
	}
	return p
}

// daemonEnv parses "[NAME=value ...] make run" into its variables.
func daemonEnv(t *testing.T, line string) map[string]string {
	t.Helper()
	env := map[string]string{}
	fields := strings.Fields(line)
	for len(fields) > 0 {
		name, value, ok := strings.Cut(fields[0], "=")
		if !ok {
			break
		}
		env[name] = value
		fields = fields[1:]
	}
	if strings.Join(fields, " ") != "make run" || strings.Contains(line, "\n") {
		t.Fatalf("the README's start line %q is not \"[NAME=value ...] make run\"", line)
	}
	return env
}

// freePort is a loopback port nothing listens on at the moment.
func freePort(t *testing.T) string {
	t.Helper()
	return freePorts(t, 1)[0]
}

// freePorts returns n distinct loopback ports free at the time of the call:
// all n are held open until the last is chosen, since the kernel may give
// a port just closed to the next request.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	ports := make([]string, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, ports[i], _ = net.SplitHostPort(ln.Addr().String())
	}
	return ports
}

// startBackground runs command with bash in dir, in its own process group
// that the test's end kills, and returns its output so far.
func startBackground(t *testing.T, dir, command string) *syncBuffer {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+command)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return out
}

// waitHTTP polls url until it answers at all.
func waitHTTP(t *testing.T, url string, out *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(url)
		if err == nil {
			res.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within 60s: %v\n%s", url, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

func TestQuickstartREADME(t *testing.T) {
	blocks := readQuickstart(t, filepath.Join("..", "README.md"))
	offline, online := collectPath(blocks, "offline"), collectPath(blocks, "online")
	if len(offline.daemon) != 1 || len(online.daemon) != 1 || len(offline.upstream) != 1 || len(online.upstream) != 0 {
		t.Fatalf("the README's quick start needs one start line per path and one local upstream offline; "+
			"found %d/%d start lines, %d/%d upstreams", len(offline.daemon), len(online.daemon),
			len(offline.upstream), len(online.upstream))
	}
	for _, want := range []string{"127.0.0.1:8081", "127.0.0.1:8080", "127.0.0.1:8000"} {
		if !strings.Contains(offline.script.String(), want) {
			t.Fatalf("the offline script no longer names %s; update this test with the README", want)
		}
	}
	if !strings.Contains(online.script.String(), "https://repo1.maven.org/maven2") {
		t.Fatal("the online path does not use Maven Central")
	}

	// Both scripts are valid bash; the online one is not run (no internet).
	for name, p := range map[string]*quickstartPath{"offline": offline, "online": online} {
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(p.script.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the %s script is not valid bash: %v\n%s", name, err, out)
		}
	}
	onlineEnv := daemonEnv(t, online.daemon[0])
	offlineEnv := daemonEnv(t, offline.daemon[0])
	for name, env := range map[string]map[string]string{"online": onlineEnv, "offline": offlineEnv} {
		for k := range env {
			if !strings.HasPrefix(k, "REGISTRYD_") {
				t.Fatalf("the %s start line sets %s, which registryd does not read", name, k)
			}
		}
	}

	requireTools(t, "mvn")
	for _, tool := range []string{"python3", "jq", "curl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the quick start needs %s, which .ci/run installs", tool)
			}
			t.Skipf("the quick start needs %s (.ci/run installs it)", tool)
		}
	}

	work := t.TempDir()
	home := filepath.Join(work, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}

	// Terminal 1: the local upstream, on a free port instead of 8000.
	port := freePort(t)
	upCmd := regexp.MustCompile(`\b8000\b`).ReplaceAllString(offline.upstream[0], port)
	if upCmd == offline.upstream[0] {
		t.Fatalf("the upstream command %q does not name port 8000", upCmd)
	}
	upOut := startBackground(t, work, upCmd)
	waitHTTP(t, "http://127.0.0.1:"+port+"/", upOut)

	// Terminal 2: registryd, with only the README's settings beyond the
	// test's ports and data dir: local upstreams are refused unless the
	// README allows them, and root's token comes from data/initial_root_token.
	env := map[string]string{
		"REGISTRYD_DATA_DIR":                      filepath.Join(work, "data"),
		"REGISTRYD_ROOT_TOKEN":                    "",
		"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK": "false",
	}
	for k, v := range offlineEnv {
		env[k] = v
	}
	d := Start(t, env)
	raw, err := os.ReadFile(filepath.Join(work, "data", "initial_root_token"))
	if err != nil {
		t.Fatal(err)
	}
	registerSecret("quick start root token", strings.TrimSpace(string(raw)))

	// Terminal 3: the commands.
	script := offline.script.String()
	script = strings.NewReplacer(
		"127.0.0.1:8081", strings.TrimPrefix(d.Admin, "http://"),
		"127.0.0.1:8080", strings.TrimPrefix(d.Proxy, "http://"),
		"127.0.0.1:8000", "127.0.0.1:"+port,
	).Replace(script)
	scriptFile := filepath.Join(work, "quickstart.sh")
	if err := os.WriteFile(scriptFile, []byte("set -euo pipefail\n"+script), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runClientErr(work, clientEnv(home), "bash", scriptFile)
	if settings, rerr := os.ReadFile(filepath.Join(work, "quickstart", "settings.xml")); rerr == nil {
		if m := regexp.MustCompile(`<password>([^<]+)</password>`).FindSubmatch(settings); m != nil {
			registerSecret("quick start ci token", string(m[1]))
		}
	}
	if err != nil {
		t.Fatalf("the README's offline quick start failed: %v\n%s\n--- registryd:\n%s\n--- upstream:\n%s",
			err, lastLines(out, 120), lastLines(d.Logs(), 40), lastLines(upOut.String(), 20))
	}
	for _, want := range []string{"BUILD SUCCESS", "Built through registryd", "/commons-lang3-"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the quick start's output lacks %q:\n%s", want, lastLines(out, 120))
		}
	}
	// The build went through registryd to the upstream: the library came
	// from the local upstream, by way of the registry the README made.
	if !strings.Contains(upOut.String(), "GET /org/apache/commons/commons-lang3/") {
		t.Fatalf("the upstream never served commons-lang3:\n%s", lastLines(upOut.String(), 40))
	}
	if _, err := os.Stat(filepath.Join(work, "quickstart", "m2", "org", "apache", "commons", "commons-lang3")); err != nil {
		t.Fatalf("mvn did not use the README's local repository: %v", err)
	}
}
