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

// S3 is a MinIO server on a loopback port, one per test binary (MinIO).
type S3 struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string

	bin  string
	dir  string // its data, removed by StopAllMinIO
	addr string // 127.0.0.1:PORT

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	logf *os.File
}

// The root credentials of the test server (loopback only).
const (
	minioAccessKey = "registryd-test"
	minioSecretKey = "registryd-test-secret-0123456789"
)

var (
	minioMu      sync.Mutex
	minioSrv     *S3
	minioErr     error
	minioBuckets atomic.Int64
)

// MinIOBinary is the MinIO server binary the tests use ("" when there is
// none), for tests that start MinIO themselves (the scale-out recipe's).
func MinIOBinary() string {
	if bin := minioBinary(); bin != "" && minioIsFile(bin) {
		return bin
	}
	return ""
}

// minioBinary finds the server: $REGISTRYD_MINIO, else minio in PATH, else
// $(go env GOPATH)/bin/minio.
func minioBinary() string {
	if p := os.Getenv("REGISTRYD_MINIO"); p != "" {
		return p
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	if gopath != "" {
		if p := filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin", "minio"); minioIsFile(p) {
			return p
		}
	}
	return ""
}

func minioIsFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// MinIO returns the test binary's MinIO server, started on first use. It
// skips the test when no binary is found, unless CI=true (then it fails).
func MinIO(t testing.TB) *S3 {
	t.Helper()
	s, err := StartMinIO()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return s
}

// StartMinIO is MinIO for programs that are not tests (make bench): the
// process's shared server, started on first use; StopAll stops it. An
// error wrapping ErrNotInstalled means there is no binary.
func StartMinIO() (*S3, error) {
	minioMu.Lock()
	defer minioMu.Unlock()
	if minioSrv == nil && minioErr == nil {
		minioSrv, minioErr = startMinIO()
	}
	return minioSrv, minioErr
}

var errNoMinIO = fmt.Errorf("testsvc: MinIO %w ($REGISTRYD_MINIO, minio in PATH, or $(go env GOPATH)/bin/minio; go install github.com/minio/minio@latest)", ErrNotInstalled)

func startMinIO() (*S3, error) {
	bin := minioBinary()
	if bin == "" || !minioIsFile(bin) {
		return nil, errNoMinIO
	}
	minioRemoveStale()
	dir, err := os.MkdirTemp("", "registryd-minio-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &S3{Endpoint: "http://" + addr, AccessKey: minioAccessKey, SecretKey: minioSecretKey, bin: bin, dir: dir, addr: addr}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// minioRemoveStale removes the data of servers whose test binary is gone
// (one that had no TestMain calling StopAllMinIO: its server died with it,
// by Pdeathsig, but the directory stays).
func minioRemoveStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "registryd-minio-*-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), "registryd-minio-"), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if !alive(pid) {
			os.RemoveAll(d)
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
	logf, err := os.OpenFile(filepath.Join(s.dir, "minio.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "server", "--quiet", "--address", s.addr, "--console-address", "127.0.0.1:0", filepath.Join(s.dir, "data"))
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test binary even when no TestMain stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("testsvc: starting minio: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done, s.logf = cmd, done, logf
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			s.stopLocked()
			return fmt.Errorf("testsvc: minio exited at start (log: %s)", filepath.Join(s.dir, "minio.log"))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("testsvc: minio not ready within a minute (log: %s)", filepath.Join(s.dir, "minio.log"))
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
	name := fmt.Sprintf("t%d-%d", os.Getpid(), minioBuckets.Add(1))
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

// CreateBucket creates the bucket name (region us-east-1).
func (s *S3) CreateBucket(name string) error {
	c, err := minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return fmt.Errorf("testsvc: creating bucket %s: %w", name, err)
	}
	return nil
}

// StopAllMinIO stops the server and removes its data (for TestMain).
func StopAllMinIO() {
	minioMu.Lock()
	defer minioMu.Unlock()
	if minioSrv != nil {
		minioSrv.Stop()
		os.RemoveAll(minioSrv.dir)
		minioSrv = nil
	}
	minioErr = nil
}
