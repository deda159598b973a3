// Package itest holds black-box integration tests: each starts the real
// registryd binary on loopback ports with a temp data dir and talks to it
// over HTTP only.
package itest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"registryd/internal/testsvc"
)

// binary is the registryd built once for the whole package.
var binary string

// gitRevision is the commit of the checkout the binary was built from (as
// the Makefile gives it: git rev-parse --short=11 HEAD), "" without git.
var gitRevision string

// logDir keeps the whole output of every daemon the suite runs, for the
// secret check after the run.
var logDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "registryd-itest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logDir = filepath.Join(dir, "logs")
	if err := os.Mkdir(logDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "registryd")
	args := []string{"build", "-o", binary}
	// The revision, as the Makefile's LDFLAGS set it.
	if out, err := exec.Command("git", "rev-parse", "--short=11", "HEAD").Output(); err == nil {
		gitRevision = strings.TrimSpace(string(out))
		args = append(args, "-ldflags", "-X main.revision="+gitRevision)
	}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/registryd")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building registryd:", err)
		os.Exit(1)
	}
	registerSecret("root token", rootToken)
	code := m.Run()
	// The cluster suite's PostgreSQL and MinIO servers live for the whole run.
	testsvc.StopAll()
	// Every daemon ran at debug level; none may have logged a credential
	// the suite used, in any line.
	if leaks := checkSecrets(os.Stderr, logDir); leaks > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d credential(s) leaked into daemon logs; the logs are kept in %s\n", leaks, logDir)
		os.Exit(1)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// plainBinary is registryd built without the race detector, for tests that
// start it a hundred times (a race-enabled start costs about a second of
// CPU): the suite's own binary when the suite runs without -race.
func plainBinary(t testing.TB) string {
	t.Helper()
	if !raceEnabled {
		return binary
	}
	plainOnce.Do(func() {
		bin := binary + "-norace"
		build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.revision="+gitRevision, "../cmd/registryd")
		if out, err := build.CombinedOutput(); err != nil {
			plainErr = fmt.Errorf("building registryd without -race: %v\n%s", err, out)
			return
		}
		plain = bin
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plain
}

var (
	plainOnce sync.Once
	plain     string
	plainErr  error
)

// rootToken is the root token every test daemon starts with.
const rootToken = "rdpat-itest-root-token-0123456789"

// Daemon is a running registryd.
type Daemon struct {
	t       testing.TB
	DataDir string
	Env     map[string]string
	Admin   string // http://127.0.0.1:port
	Proxy   string // http://127.0.0.1:port
	cmd     *exec.Cmd
	wrap    []string // a command that runs the binary (StartWrapped)
	bin     string   // the registryd binary run
	logs    *syncBuffer
	exited  chan struct{}
	exitErr error
	// client sends Do's requests; nil: http.DefaultClient (a daemon whose
	// admin listener serves TLS sets one that trusts its CA).
	client *http.Client
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs registryd with a temp data dir, loopback ports chosen by the
// kernel, the root token above, local upstreams allowed, plus env.
func Start(t testing.TB, env map[string]string) *Daemon {
	t.Helper()
	return StartWrapped(t, env)
}

// StartWrapped is Start with the daemon run by a wrapper command: wrap,
// then the binary and "serve" as its last arguments.
func StartWrapped(t testing.TB, env map[string]string, wrap ...string) *Daemon {
	t.Helper()
	return startIn(t, t.TempDir(), env, wrap, binary)
}

// startIn starts the binary bin (binary, or plainBinary's).
func startIn(t testing.TB, dir string, env map[string]string, wrap []string, bin string) *Daemon {
	t.Helper()
	d := &Daemon{t: t, DataDir: dir, wrap: wrap, bin: bin, Env: map[string]string{
		"REGISTRYD_PROXY_LISTEN":                  "127.0.0.1:0",
		"REGISTRYD_ADMIN_LISTEN":                  "127.0.0.1:0",
		"REGISTRYD_ROOT_TOKEN":                    rootToken,
		"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK": "true",
		"REGISTRYD_LOG_FORMAT":                    "json",
		// Debug, so that the secret check after the run sees every line
		// the daemon can write.
		"REGISTRYD_LOG_LEVEL":        "debug",
		"REGISTRYD_SHUTDOWN_TIMEOUT": "10s",
		// No load balancer watches a test daemon's readiness: stop at once
		// (TestReadinessWhileDraining sets its own).
		"REGISTRYD_SHUTDOWN_DRAIN_DELAY": "0s",
	}}
	for k, v := range env {
		d.Env[k] = v
	}
	secretsInEnv(d.Env)
	d.start()
	t.Cleanup(func() { d.Stop() })
	return d
}

func (d *Daemon) start() {
	d.t.Helper()
	args := append(append([]string{}, d.wrap...), d.bin, "serve")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "REGISTRYD_DATA_DIR=" + d.DataDir}
	for k, v := range d.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	pr, pw := io.Pipe()
	d.logs = &syncBuffer{}
	keep := keptLog(d.t)
	cmd.Stdout = io.MultiWriter(d.logs, keep)
	cmd.Stderr = io.MultiWriter(d.logs, keep, pw)
	if err := cmd.Start(); err != nil {
		keep.Close()
		d.t.Fatalf("starting registryd: %v", err)
	}
	d.cmd = cmd
	d.exited = make(chan struct{})
	go func() {
		d.exitErr = cmd.Wait()
		keep.Close()
		pw.Close()
		close(d.exited)
	}()
	// The "registryd started" log line carries the bound addresses; reading
	// it is the synchronisation, no sleeping.
	started := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			var line map[string]any
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "registryd started" {
				started <- line
				sent = true
			}
		}
		if !sent {
			close(started)
		}
	}()
	select {
	case line, ok := <-started:
		if !ok {
			d.t.Fatalf("registryd exited before starting: %v\n%s", d.exitErr, d.logs.String())
		}
		d.Proxy = "http://" + line["proxy"].(string)
		d.Admin = "http://" + line["admin"].(string)
	case <-time.After(60 * time.Second):
		d.t.Fatalf("registryd did not start within 60s\n%s", d.logs.String())
	}
}

// Logs is everything the daemon printed.
func (d *Daemon) Logs() string { return d.logs.String() }

// Stop sends SIGTERM and waits; it fails the test unless the exit is clean.
func (d *Daemon) Stop() {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("registryd did not stop within 30s after SIGTERM")
	}
	if d.exitErr != nil {
		d.t.Errorf("registryd exited with %v\n%s", d.exitErr, d.logs.String())
	}
	d.cmd = nil
}

// Kill sends SIGKILL and waits.
func (d *Daemon) Kill() {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
}

// Restart stops (cleanly) and starts again on the same data dir. The ports
// change: the kernel chooses new ones.
func (d *Daemon) Restart() {
	d.t.Helper()
	d.Stop()
	d.start()
}

// Resp is an HTTP answer.
type Resp struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it is not JSON.
func (r *Resp) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("body is not JSON (%v): %s", err, r.Body)
	}
}

// Map decodes a JSON object body.
func (r *Resp) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// ID is the "id" of a JSON object body as an int64.
func (r *Resp) ID(t testing.TB) int64 {
	t.Helper()
	id, ok := r.Map(t)["id"].(float64)
	if !ok {
		t.Fatalf("no id in %s", r.Body)
	}
	return int64(id)
}

// Do sends a request to the admin API. path is below /api/v4 unless it starts
// with "/-/" or "/metrics". body may be nil, a string (sent as is, JSON
// content type) or any value (JSON-encoded). token "" sends no credentials.
func (d *Daemon) Do(method, path, token string, body any, hdr ...string) *Resp {
	d.t.Helper()
	return doRequestWith(d.t, d.client, method, d.adminURL(path), body, append(tokenHeader(token), hdr...)...)
}

func (d *Daemon) adminURL(path string) string {
	if strings.HasPrefix(path, "/-/") || strings.HasPrefix(path, "/metrics") {
		return d.Admin + path
	}
	return d.Admin + "/api/v4" + path
}

func tokenHeader(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"PRIVATE-TOKEN", token}
}

// doRequest sends one request; hdr is a flat list of header names and values.
func doRequest(t testing.TB, method, url string, body any, hdr ...string) *Resp {
	t.Helper()
	return doRequestWith(t, nil, method, url, body, hdr...)
}

// doRequestWith is doRequest with client (nil: http.DefaultClient).
func doRequestWith(t testing.TB, client *http.Client, method, url string, body any, hdr ...string) *Resp {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	secretsInRequest(body, req.Header)
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	secretsInAnswer(method, req.URL.Path, raw)
	return &Resp{Status: res.StatusCode, Header: res.Header, Body: raw}
}

// Expect fails the test unless the status is want.
func (r *Resp) Expect(t testing.TB, want int) *Resp {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d; body: %s", r.Status, want, r.Body)
	}
	return r
}

// --- fixtures ---

// Fixture builds users, tokens and groups through the API as a new admin would.
type Fixture struct {
	d *Daemon
	t testing.TB
}

// Fix returns a fixture builder for d.
func (d *Daemon) Fix(t testing.TB) *Fixture { return &Fixture{d: d, t: t} }

// User creates a user and a token with the given scopes (api when none) and
// returns the user id and token value.
func (f *Fixture) User(username string, admin bool, scopes ...string) (int64, string) {
	f.t.Helper()
	if len(scopes) == 0 {
		scopes = []string{"api"}
	}
	id := f.d.Do("POST", "/users", rootToken, map[string]any{
		"username": username, "name": username, "email": username + "@example.com", "admin": admin,
	}).Expect(f.t, 201).ID(f.t)
	tok := f.d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", id), rootToken, map[string]any{
		"name": "t", "scopes": scopes,
	}).Expect(f.t, 201).Map(f.t)["token"].(string)
	return id, tok
}

// Group creates a group (a subgroup when parent is not 0) as root.
func (f *Fixture) Group(path string, parent int64, visibility string) int64 {
	f.t.Helper()
	body := map[string]any{"name": path, "path": path, "visibility": visibility}
	if parent != 0 {
		body["parent_id"] = parent
	}
	return f.d.Do("POST", "/groups", rootToken, body).Expect(f.t, 201).ID(f.t)
}

// Member adds a user to a group at level.
func (f *Fixture) Member(group, user int64, level int) {
	f.t.Helper()
	f.d.Do("POST", fmt.Sprintf("/groups/%d/members", group), rootToken,
		map[string]any{"user_id": user, "access_level": level}).Expect(f.t, 201)
}

// Registry creates a virtual registry in group.
func (f *Fixture) Registry(group int64, name string) int64 {
	f.t.Helper()
	return f.d.Do("POST", fmt.Sprintf("/groups/%d/-/virtual_registries/packages/maven/registries", group), rootToken,
		map[string]any{"name": name}).Expect(f.t, 201).ID(f.t)
}

// Upstream creates an upstream under registry.
func (f *Fixture) Upstream(registry int64, url string, extra map[string]any) int64 {
	f.t.Helper()
	body := map[string]any{"url": url}
	for k, v := range extra {
		body[k] = v
	}
	return f.d.Do("POST", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d/upstreams", registry), rootToken,
		body).Expect(f.t, 201).ID(f.t)
}

func itoa(n int64) string { return fmt.Sprint(n) }
