package testsvc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"registryd/store/objects"
)

// The S3-compatible servers the tests can run against. Each is a Go
// program built from the Go module proxy (.ci/run pins the versions).
const (
	// KindMinIO is MinIO (`minio server DIR`): the first server the suite
	// ran against, archived upstream since 2026-04.
	KindMinIO = "minio"
	// KindVersityGW is versitygw with its posix backend (`versitygw
	// posix DIR`: a bucket is a directory, an object a file), maintained.
	KindVersityGW = "versitygw"
)

// s3Kind describes how to find, start and probe one kind of server.
type s3Kind struct {
	bin     string // the program's name, and $REGISTRYD_<BIN> overrides its path
	install string // the go install line that builds it
	ready   string // a path that answers 200 once the server serves
	args    func(s *S3) []string
	env     func(s *S3) []string
}

var s3Kinds = map[string]s3Kind{
	KindMinIO: {
		bin:     "minio",
		install: "go install github.com/minio/minio@latest",
		ready:   "/minio/health/ready",
		args: func(s *S3) []string {
			return []string{"server", "--quiet", "--address", s.addr, "--console-address", "127.0.0.1:0", filepath.Join(s.dir, "data")}
		},
		env: func(s *S3) []string {
			return []string{"MINIO_ROOT_USER=" + s.AccessKey, "MINIO_ROOT_PASSWORD=" + s.SecretKey,
				"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1"}
		},
	},
	KindVersityGW: {
		bin:     "versitygw",
		install: "go install github.com/versity/versitygw/cmd/versitygw@latest",
		ready:   "/health",
		// --keep-alive: without it every answer closes its connection
		// (versitygw's default), and a client pooling connections, as
		// registryd's does, pays a TCP handshake per request.
		// The posix backend keeps its metadata in extended attributes and
		// refuses to start on a filesystem without them.
		args: func(s *S3) []string {
			return []string{"--port", s.addr, "--region", "us-east-1", "--health", "/health",
				"--keep-alive", "--quiet", "posix", filepath.Join(s.dir, "data")}
		},
		env: func(s *S3) []string {
			return []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey}
		},
	},
}

// S3 is an S3-compatible server (MinIO or versitygw) on a loopback port,
// one per kind per test binary.
type S3 struct {
	Kind      string // KindMinIO or KindVersityGW
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string

	bin  string
	dir  string // its data, removed by StopAllS3
	addr string // 127.0.0.1:PORT

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	logf *os.File
}

// The root credentials of the test servers (loopback only).
const (
	s3AccessKey = "registryd-test"
	s3SecretKey = "registryd-test-secret-0123456789"
)

var (
	s3Mu      sync.Mutex
	s3Srv     = map[string]*S3{}
	s3Err     = map[string]error{}
	s3Buckets atomic.Int64
)

// S3Kind is the server the object-store and cluster tests run against:
// $REGISTRYD_TEST_S3 (minio or versitygw), minio when unset. It is read
// when a test asks for its server, not at init, and go test caches no
// result of a test that read it with a different value (the environment
// a test reads is part of its cache key).
func S3Kind() (string, error) {
	kind := os.Getenv("REGISTRYD_TEST_S3")
	if kind == "" {
		return KindMinIO, nil
	}
	if _, ok := s3Kinds[kind]; !ok {
		return "", fmt.Errorf("testsvc: REGISTRYD_TEST_S3=%q: want %s or %s", kind, KindMinIO, KindVersityGW)
	}
	return kind, nil
}

// ObjectStore returns the test binary's server of the kind S3Kind names,
// started on first use. It skips the test when no binary is found, unless
// CI=true (then it fails).
func ObjectStore(t testing.TB) *S3 {
	t.Helper()
	kind, err := S3Kind()
	if err != nil {
		t.Fatal(err)
	}
	return s3Server(t, kind)
}

// MinIO is ObjectStore under the name it had when MinIO was the only
// server (MinIO unless REGISTRYD_TEST_S3 says otherwise): proxy/'s bucket
// tests still call it, and run against versitygw too that way (make
// test-cluster-s3). New tests call ObjectStore.
func MinIO(t testing.TB) *S3 {
	t.Helper()
	return ObjectStore(t)
}

func s3Server(t testing.TB, kind string) *S3 {
	t.Helper()
	s, err := StartS3(kind)
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return s
}

// StartMinIO is StartS3(KindMinIO), for make bench.
func StartMinIO() (*S3, error) { return StartS3(KindMinIO) }

// StartS3 is for programs that are not tests (make bench): the process's
// shared server of that kind, started on first use; StopAll stops it. An
// error wrapping ErrNotInstalled means there is no binary.
func StartS3(kind string) (*S3, error) {
	if _, ok := s3Kinds[kind]; !ok {
		return nil, fmt.Errorf("testsvc: no S3 server kind %q", kind)
	}
	s3Mu.Lock()
	defer s3Mu.Unlock()
	if s3Srv[kind] == nil && s3Err[kind] == nil {
		s3Srv[kind], s3Err[kind] = startS3(kind)
	}
	return s3Srv[kind], s3Err[kind]
}

// S3Binary is the binary of that kind the tests use ("" when there is
// none), also for tests that start it themselves (the scale-out recipe's):
// $REGISTRYD_MINIO or $REGISTRYD_VERSITYGW, else the program in PATH, else
// $(go env GOPATH)/bin/<program>.
func S3Binary(kind string) string {
	k, ok := s3Kinds[kind]
	if !ok {
		return ""
	}
	if p := os.Getenv("REGISTRYD_" + strings.ToUpper(k.bin)); p != "" {
		if isFile(p) {
			return p
		}
		return ""
	}
	if p, err := exec.LookPath(k.bin); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	if gopath != "" {
		if p := filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin", k.bin); isFile(p) {
			return p
		}
	}
	return ""
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func startS3(kind string) (*S3, error) {
	k := s3Kinds[kind]
	bin := S3Binary(kind)
	if bin == "" {
		return nil, fmt.Errorf("testsvc: %s %w ($REGISTRYD_%s, %s in PATH, or $(go env GOPATH)/bin/%s; %s)",
			kind, ErrNotInstalled, strings.ToUpper(k.bin), k.bin, k.bin, k.install)
	}
	s3RemoveStale()
	dir, err := os.MkdirTemp("", "registryd-s3-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &S3{Kind: kind, Endpoint: "http://" + addr, AccessKey: s3AccessKey, SecretKey: s3SecretKey, bin: bin, dir: dir, addr: addr}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// s3RemoveStale removes the data of servers whose test binary is gone
// (one that had no TestMain calling StopAllS3: its server died with it,
// by Pdeathsig, but the directory stays).
func s3RemoveStale() {
	for _, pattern := range []string{"registryd-s3-*-*", "registryd-minio-*-*"} { // the latter: before versitygw
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
		for _, d := range dirs {
			rest := strings.TrimPrefix(strings.TrimPrefix(filepath.Base(d), "registryd-s3-"), "registryd-minio-")
			pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
			if err != nil || pid == os.Getpid() {
				continue
			}
			if !alive(pid) {
				os.RemoveAll(d)
			}
		}
	}
}

// Start starts the server again after Stop, on the same port with the
// same data, and waits until it is ready.
func (s *S3) Start() {
	if err := s.start(); err != nil {
		panic(err)
	}
}

func (s *S3) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	k := s3Kinds[s.Kind]
	logName := filepath.Join(s.dir, s.Kind+".log")
	logf, err := os.OpenFile(logName, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, k.args(s)...)
	cmd.Env = append(os.Environ(), k.env(s)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test binary even when no TestMain stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("testsvc: starting %s: %w", s.Kind, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done, s.logf = cmd, done, logf
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(s.Endpoint + k.ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			s.stopLocked()
			return fmt.Errorf("testsvc: %s exited at start (log: %s)", s.Kind, logName)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("testsvc: %s not ready within a minute (log: %s)", s.Kind, logName)
		}
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 10s) and waits for it.
func (s *S3) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *S3) stopLocked() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.logf.Close()
	s.cmd, s.done, s.logf = nil, nil, nil
}

// NewBucket creates a bucket of its own for t.
func (s *S3) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%d", os.Getpid(), s3Buckets.Add(1))
	if err := s.CreateBucket(name); err != nil {
		t.Fatal(err)
	}
	return name
}

// NewObjects is a fresh bucket of t's own as the object store registryd
// reads (objects.NewS3: path-style, region us-east-1, keys under prefix).
func (s *S3) NewObjects(t testing.TB, prefix string) *objects.S3 {
	t.Helper()
	obj, err := objects.NewS3(objects.S3Options{Endpoint: s.Endpoint, Bucket: s.NewBucket(t), Region: "us-east-1",
		AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey, PathStyle: true, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// CreateBucket creates the bucket name (region us-east-1, path-style).
func (s *S3) CreateBucket(name string) error {
	c, err := minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return fmt.Errorf("testsvc: creating bucket %s on %s: %w", name, s.Kind, err)
	}
	return nil
}

// StopAllS3 stops every S3 server this package started and removes their
// data (for TestMain).
func StopAllS3() {
	s3Mu.Lock()
	defer s3Mu.Unlock()
	for kind, s := range s3Srv {
		if s != nil {
			s.Stop()
			os.RemoveAll(s.dir)
		}
		delete(s3Srv, kind)
	}
	for kind := range s3Err {
		delete(s3Err, kind)
	}
}
