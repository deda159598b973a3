package itest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runRegistryd runs the binary to completion with only env (plus PATH and
// HOME) and returns its exit code and output. The bound is a safety net for
// a hang, not an assertion about speed.
func runRegistryd(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	secretsInEnv(env)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	keepOutput(t, out.String(), errb.String())
	if ctx.Err() != nil {
		t.Fatalf("registryd %v did not finish: %s%s", args, out.String(), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("running registryd: %v", err)
	return 0, "", ""
}

// quietEnv is a complete environment for a serve that must not bind fixed ports.
func quietEnv(dataDir string) map[string]string {
	return map[string]string{
		"REGISTRYD_DATA_DIR":     dataDir,
		"REGISTRYD_PROXY_LISTEN": "127.0.0.1:0",
		"REGISTRYD_ADMIN_LISTEN": "127.0.0.1:0",
		"REGISTRYD_ROOT_TOKEN":   rootToken,
	}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string // a fragment
		stderr   string // a fragment
		noStdout bool
	}{
		{name: "version", args: []string{"version"}, code: 0, stdout: "registryd "},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: "registryd "},
		{name: "help", args: []string{"help"}, code: 0, stdout: "registryd serve [--config FILE]"},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: "REGISTRYD_DATA_DIR"},
		{name: "no command", args: nil, code: 2, stderr: "Usage:", noStdout: true},
		{name: "unknown command", args: []string{"server"}, code: 2, stderr: `unknown command "server"`, noStdout: true},
		{name: "stray argument", args: []string{"serve", "now"}, code: 2, stderr: `unexpected argument "now"`, noStdout: true},
		{name: "unknown flag", args: []string{"serve", "--port", "1"}, code: 2, stderr: "flag provided but not defined", noStdout: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			code, stdout, stderr := runRegistryd(t, quietEnv(dir), tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) ||
				(tc.noStdout && stdout != "") {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%v created the data dir", tc.args)
			}
		})
	}
}

// TestBadConfigStartsNothing: every problem is listed in one message, the
// exit is non-zero, and no data dir, port or file is touched.
func TestBadConfigStartsNothing(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	cfgFile := filepath.Join(tmp, "registryd.yaml")
	if err := os.WriteFile(cfgFile, []byte("proxy:\n  listn: 127.0.0.1:1\nadmin:\n  max_body_bytes: lots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := quietEnv(dir)
	env["REGISTRYD_LICENSE_PLAN"] = "gold"
	env["REGISTRYD_LOG_LEVEL"] = "loud"
	env["REGISTRYD_ADMIN_LISTEN"] = "not-an-address"
	env["REGISTRYD_UPSTREAMS_CHECK_TIMEOUT"] = "soon"
	env["REGISTRYD_UPSTRAEMS_ALLOW_LOCAL_NETWORK"] = "true"
	code, stdout, stderr := runRegistryd(t, env, "serve", "--config", cfgFile)
	if code == 0 {
		t.Fatalf("a bad config started registryd:\n%s%s", stdout, stderr)
	}
	for _, want := range []string{
		"invalid configuration",
		`proxy: unknown setting "listn" (did you mean "listen"?)`,
		`"lots" is not a size`,
		`license.plan (REGISTRYD_LICENSE_PLAN): "gold" must be free, premium or ultimate`,
		`log.level (REGISTRYD_LOG_LEVEL): "loud"`,
		`admin.listen (REGISTRYD_ADMIN_LISTEN): "not-an-address" is not host:port`,
		"REGISTRYD_UPSTRAEMS_ALLOW_LOCAL_NETWORK is not a known setting (did you mean REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK?)",
		`REGISTRYD_UPSTREAMS_CHECK_TIMEOUT: "soon" is not a duration`,
		"REGISTRYD_UPSTRAEMS_ALLOW_LOCAL_NETWORK is not a known setting",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the message does not mention %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a bad config created the data dir (%v)", err)
	}
}

func TestSecondInstanceFailsFast(t *testing.T) {
	d := Start(t, nil)
	code, stdout, stderr := runRegistryd(t, quietEnv(d.DataDir), "serve")
	if code == 0 || !strings.Contains(stderr, "the data directory is in use by another registryd process") {
		t.Fatalf("second instance: exit %d\n%s%s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "registryd started") {
		t.Fatal("the second instance said it started")
	}
	// The first one is unharmed.
	wantResp(t, d.Do("GET", "/-/readiness", "", nil), 200, `{"status":"ok","cache":{"filling":true}}`)
	d.Do("GET", "/user", rootToken, nil).Expect(t, 200)
}

func TestHealthEndpoints(t *testing.T) {
	d := Start(t, nil)
	wantResp(t, d.Do("GET", "/-/readiness", "", nil), 200, `{"status":"ok","cache":{"filling":true}}`)
	wantResp(t, d.Do("GET", "/-/liveness", "", nil), 200, `{"status":"ok"}`)
	r := d.Do("GET", "/-/health", "", nil).Expect(t, 200)
	if string(r.Body) != "GitLab OK\n" {
		t.Fatalf("health body %q", r.Body)
	}
	d.Do("GET", "/user", rootToken, nil).Expect(t, 200)
	r = d.Do("GET", "/metrics", "", nil).Expect(t, 200)
	for _, want := range []string{"registryd_admin_requests_total{", "go_goroutines"} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestSIGTERM: a clean stop exits 0 (Stop fails the test otherwise), says so,
// and releases the data dir for the next start.
func TestSIGTERM(t *testing.T) {
	d := Start(t, nil)
	d.Do("GET", "/-/readiness", "", nil).Expect(t, 200)
	d.Stop()
	if !strings.Contains(d.Logs(), `"msg":"registryd stopped"`) {
		t.Fatalf("no stop line in the log:\n%s", d.Logs())
	}
	d.start()
	d.Do("GET", "/user", rootToken, nil).Expect(t, 200)
}

func TestInitialRootToken(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_ROOT_TOKEN": ""})
	path := filepath.Join(d.DataDir, "initial_root_token")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no initial_root_token: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("initial_root_token mode %v, want 0600", fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token := registerSecret("initial root token", strings.TrimSpace(string(raw)))
	if len(token) < 20 {
		t.Fatalf("token %q is too short", token)
	}
	me := d.Do("GET", "/user", token, nil).Expect(t, 200).Map(t)
	if me["username"] != "root" || me["is_admin"] != true {
		t.Fatalf("the file's token is %v", me)
	}
	// The log says where, never what.
	abs, _ := filepath.Abs(path)
	logs := d.Logs()
	if !strings.Contains(logs, abs) {
		t.Fatalf("the log does not name %s:\n%s", abs, logs)
	}
	if strings.Contains(logs, token) {
		t.Fatal("the log carries the root token")
	}
	for name, mode := range map[string]os.FileMode{"secrets.key": 0o600, "registry.db": 0o600} {
		fi, err := os.Stat(filepath.Join(d.DataDir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v (%v), want mode %v", name, fi.Mode().Perm(), err, mode)
		}
	}
	if fi, _ := os.Stat(filepath.Join(d.DataDir, "secrets.key")); fi.Size() != 32 {
		t.Fatalf("secrets.key has %d bytes, want 32", fi.Size())
	}

	// A restart on the initialised dir keeps root and the file as they are.
	d.Restart()
	again, _ := os.ReadFile(path)
	if !bytes.Equal(raw, again) {
		t.Fatal("a restart rewrote initial_root_token")
	}
	d.Do("GET", "/user", token, nil).Expect(t, 200)
	if strings.Contains(d.Logs(), "created the admin user") {
		t.Fatal("root was created again on restart")
	}
}

func TestRootTokenFromEnvironment(t *testing.T) {
	d := Start(t, nil)
	if _, err := os.Stat(filepath.Join(d.DataDir, "initial_root_token")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("initial_root_token written although REGISTRYD_ROOT_TOKEN was set (%v)", err)
	}
	if !strings.Contains(d.Logs(), "REGISTRYD_ROOT_TOKEN") || strings.Contains(d.Logs(), rootToken) {
		t.Fatalf("the log should name the variable, never the value:\n%s", d.Logs())
	}
}

// TestWrongSecretsKey: a data dir opened with another key refuses to start
// with a clear message, instead of failing on every upstream password later.
func TestWrongSecretsKey(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	f.Upstream(reg, "http://127.0.0.1:9/m", map[string]any{"username": "bot", "password": "wrongkey-bot-pw"})
	d.Stop()

	env := quietEnv(d.DataDir)
	env["REGISTRYD_SECRETS_KEY"] = strings.Repeat("ab", 32)
	code, stdout, stderr := runRegistryd(t, env, "serve")
	if code == 0 || !strings.Contains(stderr, "secrets key does not match this database") {
		t.Fatalf("another key: exit %d\n%s%s", code, stdout, stderr)
	}
	// The right key (the file) still works.
	d.start()
	d.Do("GET", vr("/registries/%d/upstreams", reg), rootToken, nil).Expect(t, 200)
}
