package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"registryd/internal/every"
	"registryd/internal/soak"
)

const benchRootToken = "rdpat-bench-root-token-0123456789"

// daemon is a registryd started by the bench.
type daemon struct {
	bin, dataDir string
	pprof        string
	env          []string // extra REGISTRYD_* settings
	cmd          *exec.Cmd
	exited       chan struct{}
	Proxy, Admin string // base URLs
	StartupTime  time.Duration

	// Set by setup.
	Group, Registry, Upstream int64
	BasicAuth                 string // "Basic ..." for the bench user
}

func buildRegistryd(dir string) (string, error) {
	bin := filepath.Join(dir, "registryd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/registryd")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

// start runs registryd and returns once it has logged its addresses and
// answers readiness; StartupTime is measured from exec to ready.
func (d *daemon) start() error {
	begin := time.Now()
	cmd := exec.Command(d.bin, "serve")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"REGISTRYD_DATA_DIR=" + d.dataDir,
		"REGISTRYD_PROXY_LISTEN=127.0.0.1:0",
		"REGISTRYD_ADMIN_LISTEN=127.0.0.1:0",
		"REGISTRYD_ROOT_TOKEN=" + benchRootToken,
		"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=true",
		"REGISTRYD_LOG_FORMAT=json",
		"REGISTRYD_LOG_LEVEL=info",
		"REGISTRYD_SHUTDOWN_DRAIN_DELAY=0s", // no load balancer to wait for
		// Every bench client is one address (loopback): the per-client
		// connection limit (256 by default) would turn the 256-client
		// herd of scenario d and the 50 clients of e into 429s. The
		// bench measures the cache, not that limit (proxy tests do).
		"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=0",
	}
	if d.pprof != "" {
		cmd.Env = append(cmd.Env, "REGISTRYD_ADMIN_PPROF_LISTEN="+d.pprof)
	}
	cmd.Env = append(cmd.Env, d.env...)
	pr, pw := io.Pipe()
	cmd.Stdout = io.Discard
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return err
	}
	d.cmd = cmd
	d.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(d.exited) }()
	started := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(pr)
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
			return errors.New("registryd exited before starting")
		}
		d.Proxy = "http://" + line["proxy"].(string)
		d.Admin = "http://" + line["admin"].(string)
	case <-time.After(120 * time.Second):
		return errors.New("registryd did not start within 120s")
	}
	for {
		res, err := http.Get(d.Admin + "/-/readiness")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Since(begin) > 120*time.Second {
			return errors.New("registryd never became ready")
		}
		time.Sleep(2 * time.Millisecond)
	}
	d.StartupTime = time.Since(begin)
	return nil
}

func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	d.cmd = nil
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// pids is the daemon's one process, for alternateCPU.
func (d *daemon) pids() []int { return []int{d.pid()} }

// api calls the admin API as root and decodes the JSON answer into out.
func (d *daemon) api(method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, d.Admin+"/api/v4"+path, rd)
	req.Header.Set("PRIVATE-TOKEN", benchRootToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// setup creates a group, a registry over originURL and a guest user whose
// token the load uses with Basic auth, as a build machine would.
func (d *daemon) setup(originURL string) error {
	var g, r, u, up, tok struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	if err := d.api("POST", "/groups", map[string]any{"name": "bench", "path": "bench"}, &g); err != nil {
		return err
	}
	if err := d.api("POST", fmt.Sprintf("/groups/%d/-/virtual_registries/packages/maven/registries", g.ID),
		map[string]any{"name": "bench"}, &r); err != nil {
		return err
	}
	if err := d.api("POST", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d/upstreams", r.ID),
		map[string]any{"url": originURL, "name": "origin"}, &up); err != nil {
		return err
	}
	if err := d.api("POST", "/users", map[string]any{"username": "builder", "name": "builder", "email": "b@example.com"}, &u); err != nil {
		return err
	}
	if err := d.api("POST", fmt.Sprintf("/groups/%d/members", g.ID), map[string]any{"user_id": u.ID, "access_level": 10}, nil); err != nil {
		return err
	}
	if err := d.api("POST", fmt.Sprintf("/users/%d/personal_access_tokens", u.ID),
		map[string]any{"name": "bench", "scopes": []string{"read_virtual_registry"}}, &tok); err != nil {
		return err
	}
	d.Group, d.Registry, d.Upstream = g.ID, r.ID, up.ID
	d.BasicAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte("builder:"+tok.Token))
	return nil
}

// metric reads one unlabelled sample from the daemon's /metrics (0 when absent).
func (d *daemon) metric(name string) (float64, error) {
	res, err := http.Get(d.Admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// base is the registry's download URL.
func (d *daemon) base() string {
	return fmt.Sprintf("%s/api/v4/virtual_registries/packages/maven/%d", d.Proxy, d.Registry)
}

// peakRSS samples pid's RSS every 5ms until stop is closed.
func peakRSS(pid int, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		every.TickNow(stop, 5*time.Millisecond, func() {
			if r := soak.RSS(pid); r > peak {
				peak = r
			}
		})
		out <- peak
	}()
	return out
}

// --- origin ---

// origin serves the artifact tree. With nginx installed it runs nginx with two
// servers: the static origin (also the baseline) and a proxy_cache with
// proxy_cache_lock in front of it. Otherwise a Go static server is both.
type origin struct {
	dir       string
	URL       string // static origin
	CacheURL  string // nginx proxy_cache, "" without nginx
	Kind      string // "nginx" or "go"
	nginx     *exec.Cmd
	nginxDir  string
	goSrv     *http.Server
	goCounter sync.Map // path -> *atomic.Int64
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

const nginxConf = `
worker_processes auto;
daemon off;
user root;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log warn;
events { worker_connections 4096; }
http {
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  default_type application/octet-stream;
  access_log off;
  proxy_cache_path {{dir}}/cache levels=1:2 keys_zone=bench:64m max_size=20g inactive=1d use_temp_path=off;
  upstream origin { server 127.0.0.1:{{origin_port}}; keepalive 64; }
  server {
    listen 127.0.0.1:{{origin_port}};
    root {{root}};
    access_log {{dir}}/origin.log;
  }
  server {
    listen 127.0.0.1:{{cache_port}};
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache bench;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 120s;
      proxy_cache_valid 200 1d;
      proxy_buffering on;
    }
  }
}
`

func startOrigin(dir, work string, useNginx bool) (*origin, error) {
	o := &origin{dir: dir}
	if useNginx {
		op, err := freePort()
		if err != nil {
			return nil, err
		}
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		o.nginxDir = filepath.Join(work, "nginx")
		if err := os.MkdirAll(filepath.Join(o.nginxDir, "cache"), 0o755); err != nil {
			return nil, err
		}
		conf := strings.NewReplacer("{{dir}}", o.nginxDir, "{{root}}", dir,
			"{{origin_port}}", strconv.Itoa(op), "{{cache_port}}", strconv.Itoa(cp)).Replace(nginxConf)
		confPath := filepath.Join(o.nginxDir, "nginx.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		o.nginx = exec.Command("nginx", "-c", confPath, "-p", o.nginxDir)
		o.nginx.Stderr = os.Stderr
		if err := o.nginx.Start(); err != nil {
			return nil, err
		}
		o.URL = fmt.Sprintf("http://127.0.0.1:%d", op)
		o.CacheURL = fmt.Sprintf("http://127.0.0.1:%d", cp)
		o.Kind = "nginx"
		return o, waitHTTP(o.URL + "/")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fs := http.FileServer(http.Dir(dir))
	o.goSrv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := o.goCounter.LoadOrStore(r.URL.Path, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		fs.ServeHTTP(w, r)
	})}
	go func() { _ = o.goSrv.Serve(ln) }()
	o.URL = "http://" + ln.Addr().String()
	o.Kind = "go"
	return o, nil
}

// pids returns what lists nginx's processes (the master and its workers),
// for alternateCPU; nil for the Go static server, which runs inside the
// bench and shares its CPU time with the load client.
func (o *origin) pids() func() []int {
	if o.nginx == nil {
		return nil
	}
	master := o.nginx.Process.Pid
	return func() []int { return append([]int{master}, childrenOf(master)...) }
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name (in parentheses, which may hold
		// spaces): state, then the parent's pid.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func waitHTTP(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := http.Get(url)
		if err == nil {
			res.Body.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer", url)
}

// fetches counts how often the origin served path (as the URL path).
func (o *origin) fetches(path string) int {
	if o.goSrv != nil {
		if c, ok := o.goCounter.Load(path); ok {
			return int(c.(*atomic.Int64).Load())
		}
		return 0
	}
	raw, err := os.ReadFile(filepath.Join(o.nginxDir, "origin.log"))
	if err != nil {
		return 0
	}
	n := 0
	needle := " " + path + " "
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, needle) && strings.Contains(line, "\"GET ") {
			n++
		}
	}
	return n
}

func (o *origin) stop() {
	if o.nginx != nil {
		_ = o.nginx.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { _ = o.nginx.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = o.nginx.Process.Kill()
		}
	}
	if o.goSrv != nil {
		_ = o.goSrv.Close()
	}
}
