package itest

// The start and stop of the daemon as an operator sees them: a bad
// configuration, or a listen address that cannot be bound, leaves nothing on
// disk; external.url follows admin.listen; durations in the log are text;
// /-/readiness answers 503 while a stop drains.

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noTrace fails the test when dir exists.
func noTrace(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("the failed start left %s behind (%v, %d entries)", dir, err, len(entries))
	}
}

// TestConfigBadListenLeavesNoTrace: a listen address that cannot work is a
// configuration problem, listed with the others before anything starts.
func TestConfigBadListenLeavesNoTrace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env := quietEnv(dir)
	env["REGISTRYD_PROXY_LISTEN"] = ":99999"
	env["REGISTRYD_ADMIN_LISTEN"] = "127.0.0.1:http"
	env["REGISTRYD_ADMIN_PPROF_LISTEN"] = "localhost"
	env["REGISTRYD_ROOT_TOKEN"] = ""
	code, stdout, stderr := runRegistryd(t, env, "serve")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		`proxy.listen (REGISTRYD_PROXY_LISTEN): ":99999" has port 99999; a port is 1 to 65535`,
		`admin.listen (REGISTRYD_ADMIN_LISTEN): "127.0.0.1:http" has no port number`,
		`admin.pprof_listen (REGISTRYD_ADMIN_PPROF_LISTEN): "localhost" is not host:port`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the message does not say %q:\n%s", want, stderr)
		}
	}
	noTrace(t, dir)
}

// TestConfigTakenPortLeavesNoTrace: what validation cannot know (a port
// another process holds, a host that is not this machine's) fails at the
// bind, which comes before the data dir, the secrets, root and its token.
func TestConfigTakenPortLeavesNoTrace(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct{ setting, value, want string }{
		{"REGISTRYD_PROXY_LISTEN", taken.Addr().String(), "proxy listener (proxy.listen " + taken.Addr().String() + ")"},
		{"REGISTRYD_ADMIN_LISTEN", taken.Addr().String(), "admin listener (admin.listen " + taken.Addr().String() + ")"},
		{"REGISTRYD_ADMIN_PPROF_LISTEN", taken.Addr().String(), "pprof listener (admin.pprof_listen " + taken.Addr().String() + ")"},
		// 192.0.2.0/24 is TEST-NET-1: no interface of this machine has it.
		{"REGISTRYD_ADMIN_LISTEN", "192.0.2.1:8081", "admin listener (admin.listen 192.0.2.1:8081)"},
	} {
		t.Run(tc.setting+"="+tc.value, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			env := quietEnv(dir)
			env[tc.setting] = tc.value
			env["REGISTRYD_ROOT_TOKEN"] = "" // would write initial_root_token
			code, stdout, stderr := runRegistryd(t, env, "serve")
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 1 and %q\n%s%s", code, tc.want, stdout, stderr)
			}
			noTrace(t, dir)
		})
	}
}

// TestConfigPlainErrors: a misspelt key in the file reads as an operator
// would say it, with the file, the line and a suggestion, never a Go type.
func TestConfigPlainErrors(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	file := filepath.Join(tmp, "registryd.yaml")
	if err := os.WriteFile(file, []byte("proxy:\n  read_timout: 5s\n  write_timeout: 60\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runRegistryd(t, quietEnv(dir), "serve", "--config", file)
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		file + `:2: proxy: unknown setting "read_timout" (did you mean "read_timeout"?)`,
		file + `:3: proxy.write_timeout: "60" is not a duration (like 30s or 5m)`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the message does not say %q:\n%s", want, stderr)
		}
	}
	if goish := []string{"config.", "in type", "time.Duration", "unmarshal"}; strings.ContainsAny(stderr, "!") ||
		containsAny(stderr, goish) {
		t.Errorf("the message speaks Go:\n%s", stderr)
	}
	noTrace(t, dir)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestConfigExampleFileStarts: the example file in config/ is a working
// configuration as it is (with the test's ports and data dir).
func TestConfigExampleFileStarts(t *testing.T) {
	example, err := filepath.Abs(filepath.Join("..", "config", "registryd.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := Start(t, map[string]string{"REGISTRYD_CONFIG": example})
	d.Do("GET", "/-/readiness", "", nil).Expect(t, 200)
}

// TestConfigExternalURLFollowsAdminListen: without external.url, links
// name the address the admin API listens on (the port the kernel chose,
// here), so GitLab clients given that address see their own base URL.
func TestConfigExternalURLFollowsAdminListen(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_EXTERNAL_URL": ""})
	f := d.Fix(t)
	f.User("alice", false)
	r := d.Do("GET", "/users?per_page=1", rootToken, nil).Expect(t, 200)
	link := r.Header.Get("Link")
	if !strings.HasPrefix(link, "<"+d.Admin+"/api/v4/users?") {
		t.Fatalf("Link %q does not start with the admin address %s", link, d.Admin)
	}
	if !strings.Contains(d.Logs(), `"external_url":"`+d.Admin+`"`) {
		t.Fatalf("the start line does not name external_url %s", d.Admin)
	}
}

// logLine is the first JSON log line with msg.
func logLine(t *testing.T, logs, msg string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return nil
}

// TestConfigDurationsLoggedAsText: a JSON log line carries "10s", not
// 10000000000.
func TestConfigDurationsLoggedAsText(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_SHUTDOWN_DRAIN_DELAY": "1ms"})
	d.Stop()
	line := logLine(t, d.Logs(), "closing the listeners; in-flight requests may finish")
	if line["timeout"] != "10s" {
		t.Fatalf("timeout logged as %#v, want \"10s\"", line["timeout"])
	}
	line = logLine(t, d.Logs(), "shutting down: /-/readiness answers 503, still serving until the drain delay is over")
	if line["drain_delay"] != "1ms" {
		t.Fatalf("drain_delay logged as %#v, want \"1ms\"", line["drain_delay"])
	}

}

// waitNotReady polls a readiness URL until it answers 503 after a stop
// began; every poll must be answered (200 or 503), never refused.
func waitNotReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(url)
		if err != nil {
			t.Fatalf("%s refused during the drain delay: %v", url, err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable {
			return
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s answered %d", url, res.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still 200 30s after SIGTERM", url)
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a synchronisation
	}
}

// TestReadinessWhileDraining: after SIGTERM, /-/readiness answers 503 while
// both listeners still answer requests, for shutdown.drain_delay; a second
// signal ends the delay, and the stop is clean.
func TestReadinessWhileDraining(t *testing.T) {
	// A delay far longer than the test: only the second signal can end it.
	d := Start(t, map[string]string{"REGISTRYD_SHUTDOWN_DRAIN_DELAY": "1h"})
	d.Do("GET", "/-/readiness", "", nil).Expect(t, 200)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitNotReady(t, d.Admin+"/-/readiness")
	wantResp(t, d.Do("GET", "/-/readiness", "", nil), 503, `{"status":"failed","message":"shutting down"}`)
	// Both listeners still serve: the API, health, and the download path.
	d.Do("GET", "/user", rootToken, nil).Expect(t, 200)
	d.Do("GET", "/-/liveness", "", nil).Expect(t, 200)
	res, err := http.Get(d.Proxy + "/api/v4/virtual_registries/packages/maven/1/org/x/x/1/x-1.pom")
	if err != nil {
		t.Fatalf("the proxy listener refused during the drain delay: %v", err)
	}
	res.Body.Close()
	if res.StatusCode >= 500 {
		t.Fatalf("proxy answered %d during the drain delay", res.StatusCode)
	}
	select {
	case <-d.exited:
		t.Fatalf("registryd exited during the drain delay:\n%s", d.Logs())
	default:
	}

	// The second signal: out now, cleanly.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("registryd did not stop within 30s of the second signal")
	}
	if d.exitErr != nil {
		t.Fatalf("exit: %v\n%s", d.exitErr, d.Logs())
	}
	d.cmd = nil
	for _, msg := range []string{"a second signal: the drain delay is cut short", "registryd stopped"} {
		logLine(t, d.Logs(), msg)
	}
	if _, err := http.Get(d.Admin + "/-/readiness"); err == nil {
		t.Fatal("the admin listener still answers after the stop")
	}
}
