package itest

// docs/scale-out.md's "Three nodes on one machine (Debian)", run as
// written: its blocks are taken from the file by their
// <!-- scale-out KIND --> markers, so the recipe cannot promise what it no
// longer does.
//
//   - "install": the apt-get line, run as root on a fresh machine. Not run
//     here (root, the network); checked by bash -n, and every package it
//     names must be in .ci/packages (which .ci/run installs).
//   - "script": the rest, in order, in one bash with -euo pipefail from the
//     top of the repository, on kernel-chosen loopback ports (the recipe's
//     RD, *_PORT(S) variables) and the versitygw binary the cluster suite
//     uses (VERSITYGW: the recipe's go install line is skipped when it
//     exists). It
//     must end showing that a file fetched through node 1 is a hit on node
//     2 with no upstream request, which the test checks again itself.
//   - "cleanup": run in a fresh bash given only RD; afterwards nothing the
//     recipe started runs and RD is gone.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"registryd/internal/testsvc"
)

// recipeBlock is one marked fenced block of docs/scale-out.md.
type recipeBlock struct {
	kind string // install, script, cleanup
	line int    // of the opening fence
	text string
}

// readRecipe returns the marked blocks of file, in order.
func readRecipe(t *testing.T, file string) []recipeBlock {
	t.Helper()
	var blocks []recipeBlock
	for _, b := range readDocBlocks(t, file, "scale-out") {
		switch b.args[0] {
		case "install", "script", "cleanup":
		default:
			t.Fatalf("%s:%d: unknown scale-out block kind %q", file, b.line, b.args[0])
		}
		if len(b.args) != 1 {
			t.Fatalf("%s:%d: a scale-out marker takes one word, got %q", file, b.line, strings.Join(b.args, " "))
		}
		blocks = append(blocks, recipeBlock{kind: b.args[0], line: b.line, text: b.text})
	}
	return blocks
}

// recipeNeeds skips (fails with CI=true) a test whose environment lacks
// something the recipe uses.
func recipeNeeds(t *testing.T, missing []string) {
	t.Helper()
	if len(missing) == 0 {
		return
	}
	msg := "the scale-out recipe needs " + strings.Join(missing, ", ") +
		" (on Debian: the packages of .ci/packages, as .ci/run installs them; versitygw as .ci/run builds it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func TestClusterScaleOutRecipe(t *testing.T) {
	doc := filepath.Join("..", "docs", "scale-out.md")
	var install, script, cleanup []recipeBlock
	for _, b := range readRecipe(t, doc) {
		switch b.kind {
		case "install":
			install = append(install, b)
		case "script":
			script = append(script, b)
		case "cleanup":
			cleanup = append(cleanup, b)
		}
	}
	if len(install) != 1 || len(script) == 0 || len(cleanup) != 1 {
		t.Fatalf("%s: the recipe needs one install block, script blocks and one cleanup block; found %d, %d, %d",
			doc, len(install), len(script), len(cleanup))
	}
	var sb strings.Builder
	for _, b := range script {
		fmt.Fprintf(&sb, "# docs/scale-out.md, block at line %d\n%s\n", b.line, b.text)
	}
	scriptText := sb.String()
	for name, text := range map[string]string{"install": install[0].text, "script": scriptText, "cleanup": cleanup[0].text} {
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the recipe's %s is not valid bash: %v\n%s", name, err, out)
		}
	}

	// The install line names packages .ci/run installs (the one list).
	listed := map[string]bool{}
	raw, err := os.ReadFile(filepath.Join("..", ".ci", "packages"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			listed[f[0]] = true
		}
	}
	var packages []string
	fields := strings.Fields(install[0].text)
	for i := 1; len(fields) > 0 && fields[0] == "apt-get" && i < len(fields); i++ {
		switch f := fields[i]; {
		case f == "-o":
			i++ // its value
		case strings.HasPrefix(f, "-"):
		case f == "install" && packages == nil:
			packages = []string{}
		case packages != nil:
			packages = append(packages, f)
		}
	}
	if len(packages) == 0 || strings.Contains(strings.TrimSpace(install[0].text), "\n") {
		t.Fatalf("the recipe's install block is not one \"apt-get [OPTION...] install PACKAGE...\": %q", install[0].text)
	}
	for _, p := range packages {
		if !listed[p] {
			t.Errorf("the recipe installs %s, which .ci/packages does not list", p)
		}
	}
	// The versitygw it builds is the one CI builds.
	ciRun, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	ciPin := regexp.MustCompile(`(?m)^VERSITYGW_VERSION=(\S+)$`).FindSubmatch(ciRun)
	docPin := regexp.MustCompile(`github\.com/versity/versitygw/cmd/versitygw@(\S+)`).FindStringSubmatch(scriptText)
	if ciPin == nil || docPin == nil || string(ciPin[1]) != docPin[1] {
		t.Errorf("the recipe's versitygw version %q differs from .ci/run's VERSITYGW_VERSION %q", docPin, ciPin)
	}
	// Every address comes from the variables: each default port is named
	// once, as its default, so the free ports below reach every command.
	defaults := map[string]string{"PG_PORT": "55432", "S3_PORT": "9000", "UPSTREAM_PORT": "8000",
		"PROXY_PORTS": "8181 8182 8183", "ADMIN_PORTS": "8191 8192 8193"}
	for name, def := range defaults {
		if !strings.Contains(scriptText, "${"+name+":-"+def+"}") {
			t.Fatalf("the recipe no longer reads %s (default %s); update this test with it", name, def)
		}
		for _, port := range strings.Fields(def) {
			if n := len(regexp.MustCompile(`\b`+port+`\b`).FindAllString(scriptText, -1)); n != 1 {
				t.Errorf("the recipe names port %s %d times: only its variable's default may", port, n)
			}
		}
	}
	if !strings.Contains(scriptText, "${RD:-/tmp/registryd-cluster}") || !strings.Contains(cleanup[0].text, "${RD:-/tmp/registryd-cluster}") {
		t.Fatal("the recipe and its cleanup no longer read RD (default /tmp/registryd-cluster); update this test with them")
	}
	if t.Failed() {
		return
	}

	// What the recipe needs on this machine.
	var missing []string
	env := map[string]string{}
	if bin := os.Getenv("REGISTRYD_PG_BINDIR"); bin != "" {
		env["PG_BIN"] = bin
		if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
			missing = append(missing, "PostgreSQL's initdb in $REGISTRYD_PG_BINDIR")
		}
	} else if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
		missing = append(missing, "PostgreSQL's server (package postgresql)")
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			missing = append(missing, "the user postgres (package postgresql), to run PostgreSQL as root")
		}
	}
	if bin := testsvc.S3Binary(testsvc.KindVersityGW); bin != "" {
		env["VERSITYGW"] = bin
	} else {
		missing = append(missing, "versitygw ($REGISTRYD_VERSITYGW, versitygw in PATH, or $(go env GOPATH)/bin/versitygw)")
	}
	for _, tool := range []string{"bash", "curl", "jq", "python3", "make", "go", "cmp", "runuser"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, "the "+tool+" command")
		}
	}
	if !dirExists(filepath.Join(debianMavenRepo, "org/apache/commons/commons-lang3")) {
		missing = append(missing, "commons-lang3 in "+debianMavenRepo+" (package libcommons-lang3-java)")
	}
	recipeNeeds(t, missing)

	// RD: a directory the user postgres may pass through (when root), in a
	// temp dir removed at the end, whatever happens.
	work, err := os.MkdirTemp("", "registryd-recipe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	rd := filepath.Join(work, "cluster")
	env["RD"] = rd
	ports := freePorts(t, 9) // distinct: nine ports chosen one by one could repeat
	env["PG_PORT"], env["S3_PORT"], env["UPSTREAM_PORT"] = ports[0], ports[1], ports[2]
	proxy, admin := ports[3:6], ports[6:9]
	env["PROXY_PORTS"] = strings.Join(proxy, " ")
	env["ADMIN_PORTS"] = strings.Join(admin, " ")
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}

	// Whatever happens, nothing the recipe started outlives the test: its
	// cleanup block, then SIGKILL to the script's process group (the nodes,
	// the S3 server, the upstream) and to the postmaster.
	var pgid int
	t.Cleanup(func() {
		if _, err := os.Stat(rd); err == nil {
			if out, err := runRecipeBash(repo, map[string]string{"RD": rd}, cleanup[0].text, time.Minute); err != nil {
				t.Logf("the recipe's cleanup, after a failure: %v\n%s", err, lastLines(out, 20))
			}
		}
		if pgid > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if pid := postmasterPID(rd); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	outFile := filepath.Join(work, "recipe.out")
	out, err := runRecipeBashPgid(repo, env, "set -euo pipefail\n"+scriptText, 10*time.Minute, outFile, &pgid)
	keepRecipeLogs(t, rd)
	if err != nil {
		t.Fatalf("the scale-out recipe failed: %v\n%s\n%s", err, lastLines(out, 60), recipeLogTails(rd))
	}

	// What it printed: node 2's hit, no upstream request of node 2's, and
	// the upstream asked once.
	var hitLine, upstreamLine bool
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "registryd_cache_lookups_total{") && strings.Contains(line, `kind="artifact"`) &&
			strings.Contains(line, `result="hit"`) && strings.HasSuffix(line, " 1") {
			hitLine = true
		}
		if strings.HasPrefix(line, "registryd_upstream_requests_total{") {
			upstreamLine = true
		}
	}
	if !hitLine || upstreamLine || !strings.HasSuffix(strings.TrimSpace(out), "\n1") ||
		!strings.Contains(out, "node 2 served the bytes node 1 fetched") {
		t.Fatalf("the recipe does not show a hit on node 2 without an upstream request:\n%s", lastLines(out, 30))
	}

	// The same, asked of the nodes and the upstream by the test.
	metricsOf := func(port string) []byte {
		res, err := http.Get("http://127.0.0.1:" + port + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("/metrics on port %s: %d %v", port, res.StatusCode, err)
		}
		return body
	}
	node1, node2 := metricsOf(admin[0]), metricsOf(admin[1])
	if n := metricSumIn(node2, "registryd_cache_lookups_total", `kind="artifact"`, `result="hit"`); n != 1 {
		t.Errorf("node 2 counted %v artifact hits, want 1", n)
	}
	if n := metricSumIn(node2, "registryd_cache_lookups_total", `result="miss"`); n != 0 {
		t.Errorf("node 2 counted %v misses, want 0", n)
	}
	if n := metricSumIn(node2, "registryd_upstream_requests_total"); n != 0 {
		t.Errorf("node 2 made %v upstream requests, want 0", n)
	}
	if n := metricSumIn(node1, "registryd_upstream_requests_total", `outcome="ok"`); n < 1 {
		t.Errorf("node 1 made %v successful upstream requests, want at least 1 (the fill)", n)
	}
	upLog, err := os.ReadFile(filepath.Join(rd, "upstream.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := regexp.MustCompile(`"GET /org/apache/commons/commons-lang3/[0-9.]+/commons-lang3-[0-9.]+\.jar HTTP`).FindAll(upLog, -1); len(n) != 1 {
		t.Errorf("the upstream served the jar %d times, want 1:\n%s", len(n), lastLines(string(upLog), 20))
	}

	// The cleanup, in a shell of its own given only RD: every process the
	// recipe started is gone, and so is RD.
	var pids []int
	pidFiles, _ := filepath.Glob(filepath.Join(rd, "*.pid"))
	for _, f := range pidFiles {
		b, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}
	if pid := postmasterPID(rd); pid > 0 {
		pids = append(pids, pid)
	} else {
		t.Error("PostgreSQL's postmaster.pid is not in $RD/pg/data")
	}
	if len(pids) != 6 {
		t.Errorf("the recipe recorded %d processes (%v), want 6: three nodes, the S3 server, the upstream, PostgreSQL", len(pids), pidFiles)
	}
	cout, err := runRecipeBash(repo, map[string]string{"RD": rd}, "set -euo pipefail\n"+cleanup[0].text, 2*time.Minute)
	if err != nil {
		t.Fatalf("the recipe's cleanup failed: %v\n%s", err, lastLines(cout, 30))
	}
	for _, pid := range pids {
		if processRunning(pid) {
			t.Errorf("process %d still runs after the cleanup", pid)
		}
	}
	if _, err := os.Stat(rd); !os.IsNotExist(err) {
		t.Errorf("$RD is still there after the cleanup: %v", err)
	}
}

// processRunning: pid exists and has not exited. An exited process its
// parent has not collected yet (a zombie: the recipe's background jobs are
// orphans once its shell ends, left to PID 1, which may collect them late)
// has exited: kill(pid, 0) alone would call it running.
func processRunning(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(raw, ')') // the name may hold spaces and parentheses
	return i >= 0 && i+2 < len(raw) && raw[i+2] != 'Z'
}

// runRecipeBash runs script with bash in dir, with the environment plus
// env, and returns its output.
func runRecipeBash(dir string, env map[string]string, script string, timeout time.Duration) (string, error) {
	return runRecipeBashPgid(dir, env, script, timeout, "", nil)
}

// runRecipeBashPgid is runRecipeBash in a process group of its own, whose id
// it stores in *pgid (for the test's cleanup), with the output written to
// the file outFile ("": a temp file). The output goes to a file, not a
// pipe: the processes the script leaves running in the background must not
// hold the test up.
func runRecipeBashPgid(dir string, env map[string]string, script string, timeout time.Duration, outFile string, pgid *int) (string, error) {
	var f *os.File
	var err error
	if outFile == "" {
		f, err = os.CreateTemp("", "registryd-recipe-out-")
	} else {
		f, err = os.Create(outFile)
	}
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); env[name] == "" && !recipeVar(name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return "", err
	}
	if pgid != nil {
		*pgid = cmd.Process.Pid
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (not done within %v)", err, timeout)
	}
	out, _ := os.ReadFile(f.Name())
	return string(out), err
}

// recipeVar: a variable the recipe reads, never taken from the test's own
// environment.
func recipeVar(name string) bool {
	switch name {
	case "RD", "PG_PORT", "S3_PORT", "UPSTREAM_PORT", "PROXY_PORTS", "ADMIN_PORTS", "PG_BIN", "VERSITYGW":
		return true
	}
	return false
}

// postmasterPID is the pid in $RD/pg/data/postmaster.pid (0: none).
func postmasterPID(rd string) int {
	b, err := os.ReadFile(filepath.Join(rd, "pg", "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// keepRecipeLogs hands the nodes' logs and credentials to the suite's
// secret check (TestMain): no node may have logged the recipe's database
// password, S3 secret, keys or root token.
func keepRecipeLogs(t *testing.T, rd string) {
	t.Helper()
	if cfg, err := os.ReadFile(filepath.Join(rd, "cluster.yaml")); err == nil {
		for _, re := range []string{`dsn: postgres://registryd:([^@]+)@`, `secret_access_key: (\S+)`,
			`key: ([0-9a-f]{64})`, `secret: ([0-9a-f]{64})`, `token: (\S+)`} {
			if m := regexp.MustCompile(re).FindSubmatch(cfg); m != nil {
				registerSecret("scale-out recipe: "+re, string(m[1]))
			}
		}
	}
	var logs []string
	for i := 1; i <= 3; i++ {
		if b, err := os.ReadFile(filepath.Join(rd, fmt.Sprintf("node%d.log", i))); err == nil {
			logs = append(logs, string(b))
		}
	}
	if len(logs) > 0 {
		keepOutput(t, logs...)
	}
}

// recipeLogTails is the end of each log the recipe writes, for a failure.
func recipeLogTails(rd string) string {
	var sb strings.Builder
	for _, name := range []string{"node1.log", "node2.log", "node3.log", "s3.log", "upstream.log", "pg/postgres.log", "pg/initdb.log"} {
		if b, err := os.ReadFile(filepath.Join(rd, name)); err == nil {
			fmt.Fprintf(&sb, "--- %s:\n%s\n", name, lastLines(string(b), 15))
		}
	}
	return sb.String()
}
