// Package testsvc starts the real servers registryd's tests run against:
// PostgreSQL (this file) and an S3-compatible object store (s3.go: MinIO or
// versitygw). A server is started once per test binary, on a loopback port,
// in a temp dir, and stopped by StopAll, which a package's TestMain calls
// after m.Run.
//
// It imports only the standard library so that any test package may use it
// without pulling a driver in.
package testsvc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pgBinDir is where Debian's postgresql-15 package puts the server binaries;
// $REGISTRYD_PG_BINDIR overrides it (another distribution or version).
const pgBinDir = "/usr/lib/postgresql/15/bin"

// pgDirPrefix names the temp dirs of servers started by this package, so a
// later run can find what a crashed one left (see sweepStale).
const pgDirPrefix = "registryd-pg-"

// PG is a PostgreSQL server started for tests. Its methods are safe for
// concurrent use, but Stop and Start affect every test using the server:
// tests that stop it must not run in parallel with others of the same binary.
type PG struct {
	bin  string // directory of initdb, postgres, psql
	dir  string // temp dir: data/, the socket, postgres.log, owner
	port int
	cred *syscall.Credential // nil: run as the current user

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	stopped bool          // Stop called (and no Start since)
	removed bool          // StopAll removed dir
}

var (
	pgMu     sync.Mutex
	pgShared *PG
	pgErr    error
	pgAll    []*PG // every server started, for StopAll
	dbSeq    atomic.Int64
)

// Postgres returns the test binary's PostgreSQL server, starting it on the
// first call. Without the binaries it skips the test, unless CI=true, where a
// missing server is a broken environment and fails it.
func Postgres(t testing.TB) *PG {
	t.Helper()
	pg, err := StartPostgres()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skipf("testsvc: %v", err)
		}
		t.Fatalf("testsvc: %v", err)
	}
	return pg
}

// StartPostgres is Postgres for programs that are not tests (make bench):
// the process's shared server, started on first use; StopAll stops it. An
// error wrapping ErrNotInstalled means the binaries are missing.
func StartPostgres() (*PG, error) {
	pgMu.Lock()
	defer pgMu.Unlock()
	if pgShared == nil && pgErr == nil {
		pgShared, pgErr = startPG()
	}
	return pgShared, pgErr
}

// ErrNotInstalled is wrapped by the errors of a server whose binary is not
// on this machine: tests skip then, unless CI=true.
var ErrNotInstalled = errors.New("not installed")

// PostgresPrivate starts a server of its own for one test (stopped and
// removed in t.Cleanup), for tests that stop and restart it while other
// tests of the binary keep using the shared one. It costs an initdb (about a
// second).
func PostgresPrivate(t testing.TB) *PG {
	t.Helper()
	pg, err := func() (*PG, error) {
		pgMu.Lock()
		defer pgMu.Unlock()
		return startPG()
	}()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skipf("testsvc: %v", err)
		}
		t.Fatalf("testsvc: %v", err)
	}
	t.Cleanup(pg.remove)
	return pg
}

// StopAll stops every server this package started (PostgreSQL and the S3
// servers) and removes their directories. Call it from TestMain after m.Run.
func StopAll() {
	pgMu.Lock()
	all := pgAll
	pgAll = nil
	pgShared, pgErr = nil, nil
	pgMu.Unlock()
	for _, pg := range all {
		pg.remove()
	}
	StopAllS3()
}

var errNoBinaries = fmt.Errorf("PostgreSQL server binaries %w", ErrNotInstalled)

// startPG creates a cluster in a new temp dir and starts it. Called with
// pgMu held.
func startPG() (*PG, error) {
	bin := os.Getenv("REGISTRYD_PG_BINDIR")
	if bin == "" {
		bin = pgBinDir
	}
	for _, name := range []string{"initdb", "postgres", "psql"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%w in %s (apt-get install postgresql-15, or set REGISTRYD_PG_BINDIR)", errNoBinaries, bin)
		}
	}
	sweepStale()

	dir, err := os.MkdirTemp("", pgDirPrefix)
	if err != nil {
		return nil, err
	}
	pg := &PG{bin: bin, dir: dir}
	// The owner file lets a later run tell that this test binary is gone.
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	// PostgreSQL refuses to run as root; the tests of this machine do.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs the user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"),
		"-D", filepath.Join(dir, "data"), "-U", "postgres",
		"--auth-local=trust", "--auth-host=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// A port found free may be taken before postgres binds it: try a few.
	for attempt := 0; ; attempt++ {
		pg.port, err = freePort()
		if err == nil {
			err = pg.start()
		}
		if err == nil {
			break
		}
		if attempt == 3 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	pgAll = append(pgAll, pg)
	return pg, nil
}

// freePort asks the kernel for a free loopback port (PostgreSQL, the S3 servers).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs postgres on pg.port and waits until it accepts connections.
//
// If the test binary dies without StopAll (a panic, a timeout, kill -9), the
// server must not run forever: postgres is started with the parent-death
// signal SIGKILL (Linux prctl PR_SET_PDEATHSIG), so the kernel kills the
// postmaster when the test process goes, and its backends exit on
// postmaster death. Go does not retire the OS threads that fork children
// (only threads of goroutines that exit while locked), so the signal is not
// sent early. Belt and braces, sweepStale removes what such a run left
// (a server still running whose owner pid is gone, its temp dir) at the next
// start.
func (pg *PG) start() error {
	cmd := exec.Command(filepath.Join(pg.bin, "postgres"),
		"-D", filepath.Join(pg.dir, "data"),
		"-p", strconv.Itoa(pg.port),
		"-k", pg.dir, // unix socket here, not in /var/run/postgresql
		"-c", "listen_addresses=127.0.0.1",
		// Tests want speed, not durability.
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB",
		// Three nodes in one test each keep a pool, a listener and lock
		// connections, and tests open several databases.
		"-c", "max_connections=200",
		// Serializable transactions keep predicate locks; the default 64
		// per transaction runs short under concurrent range scans.
		"-c", "max_pred_locks_per_transaction=256",
		"-c", "log_min_messages=warning",
		"-c", "log_min_error_statement=panic",
	)
	cmd.Dir = pg.dir
	logf, err := os.OpenFile(filepath.Join(pg.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	pg.cmd, pg.exited = cmd, exited

	// Poll until the server says it is ready (postmaster.pid's status
	// line) and a TCP connection is accepted, or it exits.
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if pg.ready() {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited at start (port %d):\n%s", pg.port, pg.logTail())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("postgres not ready after 60s:\n%s", pg.logTail())
		}
	}
}

// ready reports whether the postmaster says it accepts connections and the
// port answers.
func (pg *PG) ready() bool {
	b, err := os.ReadFile(filepath.Join(pg.dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[7]) != "ready" {
		return false
	}
	c, err := net.DialTimeout("tcp", pg.addr(), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (pg *PG) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.port)) }

func (pg *PG) logTail() string {
	b, _ := os.ReadFile(filepath.Join(pg.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Port is the server's TCP port on 127.0.0.1.
func (pg *PG) Port() int { return pg.port }

// AdminDSN connects to the maintenance database postgres as the superuser.
func (pg *PG) AdminDSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", pg.addr())
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a fresh database for the test and returns its DSN. It
// is dropped when the test ends (best effort: a stopped server keeps it).
func (pg *PG) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbSeq.Add(1), nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"))
	if len(name) > 63 {
		name = name[:63]
	}
	if err := pg.Exec(`CREATE DATABASE "` + name + `"`); err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	t.Cleanup(func() {
		pg.mu.Lock()
		up := pg.cmd != nil && !pg.stopped
		pg.mu.Unlock()
		if up {
			pg.Exec(`DROP DATABASE IF EXISTS "` + name + `" WITH (FORCE)`)
		}
	})
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", pg.addr(), name)
}

// Exec runs SQL (one or more statements) as the superuser in the database
// postgres, with psql.
func (pg *PG) Exec(sql string) error {
	return pg.ExecIn("postgres", sql)
}

// ExecIn runs SQL as the superuser in database db, with psql.
func (pg *PG) ExecIn(db, sql string) error {
	cmd := exec.Command(filepath.Join(pg.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", "postgres", "-d", db, "-c", sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10", "PGPASSWORD=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("psql %q: %v: %s", sql, err, bytes.TrimSpace(out))
	}
	return nil
}

// Stop shuts the server down (fast shutdown: sessions are ended, the data is
// kept) and waits until it has exited. Start brings it back.
func (pg *PG) Stop() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.stopLocked()
}

func (pg *PG) stopLocked() {
	if pg.cmd == nil || pg.stopped {
		return
	}
	pg.stopped = true
	signalTree(pg.cmd.Process.Pid, syscall.SIGCONT) // in case it was paused
	pg.cmd.Process.Signal(syscall.SIGINT)           // fast shutdown
	select {
	case <-pg.exited:
	case <-time.After(30 * time.Second):
		pg.cmd.Process.Kill()
		<-pg.exited
	}
}

// Start restarts a stopped server on the same port with the same data and
// returns once it accepts connections. It fails the test when the server
// does not come back.
func (pg *PG) Start(t ...testing.TB) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.removed || !pg.stopped {
		return
	}
	if err := pg.start(); err != nil {
		if len(t) > 0 {
			t[0].Fatalf("testsvc: restart: %v", err)
		}
		panic("testsvc: restart: " + err.Error())
	}
	pg.stopped = false
}

// Pause freezes the server (SIGSTOP to the postmaster and its children):
// connections stay open and nothing answers, as with a hung server or a
// network partition. Resume thaws it.
func (pg *PG) Pause() { pg.signalAll(syscall.SIGSTOP) }

// Resume thaws a paused server.
func (pg *PG) Resume() { pg.signalAll(syscall.SIGCONT) }

// signalAll signals the postmaster and its children (each backend calls
// setsid, so a process group signal would reach the postmaster only).
func (pg *PG) signalAll(sig syscall.Signal) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd != nil && !pg.stopped {
		signalTree(pg.cmd.Process.Pid, sig)
	}
}

func signalTree(root int, sig syscall.Signal) {
	syscall.Kill(root, sig) // first: a stopped postmaster forks no more
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse after ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == root {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			syscall.Kill(pid, sig)
		}
	}
}

func (pg *PG) remove() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.removed {
		return
	}
	pg.stopLocked()
	pg.removed = true
	os.RemoveAll(pg.dir)
}

// sweepStale removes the servers and dirs of earlier test binaries that died
// without StopAll: a dir whose owner pid no longer exists. Its postmaster,
// if still alive (parent-death signal lost), is killed first; the pid is
// checked to be a postgres process on that data dir, so a reused pid is
// left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pgDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // being created right now, or not ours
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || alive(owner) {
			continue
		}
		if f, err := os.Open(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			sc := bufio.NewScanner(f)
			if sc.Scan() {
				if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && alive(pid) {
					cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					if bytes.Contains(cmdline, []byte("postgres")) && bytes.Contains(cmdline, []byte(dir)) {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			f.Close()
		}
		os.RemoveAll(dir)
	}
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
