package pgkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/internal/testsvc"
	"registryd/store/kv"
	"registryd/store/kv/kvtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.StopAll()
	os.Exit(code)
}

func openDB(t testing.TB, o Options) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func dbName(t testing.TB, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	pg := testsvc.Postgres(t)
	kvtest.Run(t, func(t testing.TB) kv.DB {
		return openDB(t, Options{DSN: pg.NewDatabase(t)})
	})
}

var bk = []byte("b")

func TestSchemaConcurrentOpen(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := pg.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			db, err := Open(context.Background(), Options{DSN: dsn})
			if err != nil {
				errs <- err
				return
			}
			db.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Open: %v", err)
	}
	db := openDB(t, Options{DSN: dsn})
	var n, v int
	if err := db.pool.QueryRow(context.Background(), `SELECT count(*), max(version) FROM registryd_schema`).Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != 1 || v != SchemaVersion {
		t.Errorf("registryd_schema: %d rows, version %d", n, v)
	}
	// A database from a newer build is refused.
	if _, err := db.pool.Exec(context.Background(), `INSERT INTO registryd_schema (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), Options{DSN: dsn}); err == nil || errors.Is(err, kv.ErrUnavailable) {
		t.Errorf("Open of a newer schema: %v", err)
	}
}

func TestDescribeAndStats(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := strings.Replace(pg.NewDatabase(t), "postgres@", "postgres:secret@", 1)
	db := openDB(t, Options{DSN: dsn})
	if d := db.Describe(); strings.Contains(d, "secret") || !strings.Contains(d, dbName(t, dsn)) {
		t.Errorf("Describe = %q", d)
	}
	if err := db.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bk)
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), bytes.Repeat([]byte("v"), 1000))
	}); err != nil {
		t.Fatal(err)
	}
	if s := db.Stats(); s.Bytes <= 0 {
		t.Errorf("Stats = %+v", s)
	}
	if _, err := Open(context.Background(), Options{DSN: "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}); !errors.Is(err, kv.ErrUnavailable) {
		t.Errorf("Open of an unreachable server: %v, want ErrUnavailable", err)
	}
}

// TestStickyError stops the server in the middle of a transaction: the
// function's own answer (a 404 it derived from a nil) must not come out,
// the engine's error does; once the server is back, the pool recovers.
func TestStickyError(t *testing.T) {
	pg := testsvc.PostgresPrivate(t)
	db := openDB(t, Options{DSN: pg.NewDatabase(t), QueryTimeout: 5 * time.Second})
	k := []byte("k")
	if err := db.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bk)
		if err != nil {
			return err
		}
		return b.Put(k, []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	errNotFound := errors.New("not found")
	err := db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if b.Get(k) == nil {
			return errors.New("not found before the stop")
		}
		pg.Stop()
		if v := b.Get(k); v != nil {
			t.Errorf("Get on a dead connection = %q", v)
		}
		if k, _ := b.Cursor().First(); k != nil {
			t.Errorf("First on a dead transaction = %q", k)
		}
		// A dead transaction hands out dead buckets, not nil ones: the
		// store's tx.Bucket(name).Get(...) must not dereference nil.
		if dead := tx.Bucket([]byte("another")); dead == nil {
			t.Error("Bucket on a dead transaction is nil")
		} else if v := dead.Get(k); v != nil {
			t.Errorf("Get on a dead bucket = %q", v)
		} else if err := dead.Put(k, []byte("x")); err == nil {
			t.Error("Put on a dead bucket succeeded")
		}
		return errNotFound
	})
	if !errors.Is(err, kv.ErrUnavailable) || errors.Is(err, errNotFound) {
		t.Fatalf("View = %v, want the engine's error wrapping kv.ErrUnavailable", err)
	}
	var putErr error
	err = db.Update(func(tx kv.Tx) error { return nil })
	if !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("Update while down = %v", err)
	}
	pg.Start(t)
	// The first Update after the restart works: dead pooled connections
	// are replaced.
	err = db.Update(func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if b == nil {
			return errors.New("bucket lost")
		}
		putErr = b.Put(k, []byte("after"))
		return putErr
	})
	if err != nil {
		t.Fatalf("Update after the restart: %v", err)
	}
	// A failure in the middle of an Update: the write reports it, Update
	// returns it.
	err = db.Update(func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if b.Get(k) == nil {
			return errors.New("missing")
		}
		pg.Stop()
		if err := b.Put(k, []byte("lost")); !errors.Is(err, kv.ErrUnavailable) {
			t.Errorf("Put on a dead connection = %v", err)
		}
		if err := b.Put(k, []byte("lost")); !errors.Is(err, kv.ErrUnavailable) {
			t.Errorf("second Put on a dead transaction = %v", err)
		}
		return nil // the function thinks all went well
	})
	if !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("Update = %v, want ErrUnavailable", err)
	}
	pg.Start(t)
	var v []byte
	if err := db.View(func(tx kv.Tx) error { v = bytes.Clone(tx.Bucket(bk).Get(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if string(v) != "after" {
		t.Errorf("k = %q", v)
	}
}

// TestHungServer: with the server frozen, a transaction fails within its
// statement timeout instead of hanging, and works again once it thaws.
func TestHungServer(t *testing.T) {
	pg := testsvc.PostgresPrivate(t)
	db := openDB(t, Options{DSN: pg.NewDatabase(t), QueryTimeout: 500 * time.Millisecond})
	if err := db.Update(func(tx kv.Tx) error { _, err := tx.CreateBucketIfNotExists(bk); return err }); err != nil {
		t.Fatal(err)
	}
	pg.Pause()
	defer pg.Resume()
	start := time.Now()
	err := db.View(func(tx kv.Tx) error {
		if b := tx.Bucket(bk); b != nil {
			b.Get([]byte("k"))
		}
		return nil
	})
	if !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("View on a hung server = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("View took %v with a 500ms statement timeout", d)
	}
	pg.Resume()
	if err := db.Update(func(tx kv.Tx) error { return tx.Bucket(bk).Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatalf("Update after the thaw: %v", err)
	}
}

// TestSerializationRetry makes two Updates read the same key before either
// writes it: PostgreSQL aborts one, which runs again.
func TestSerializationRetry(t *testing.T) {
	pg := testsvc.Postgres(t)
	db := openDB(t, Options{DSN: pg.NewDatabase(t)})
	ctr := []byte("ctr")
	if err := db.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bk)
		if err != nil {
			return err
		}
		return b.Put(ctr, binary.BigEndian.AppendUint64(nil, 0))
	}); err != nil {
		t.Fatal(err)
	}
	before := db.Retries()
	var both sync.WaitGroup
	both.Add(2)
	increment := func() error {
		var first atomic.Bool
		first.Store(true)
		return db.Update(func(tx kv.Tx) error {
			b := tx.Bucket(bk)
			n := binary.BigEndian.Uint64(b.Get(ctr))
			if first.Swap(false) { // barrier on the first attempts only
				both.Done()
				both.Wait()
			}
			return b.Put(ctr, binary.BigEndian.AppendUint64(nil, n+1))
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() { errs <- increment() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var n uint64
	db.View(func(tx kv.Tx) error { n = binary.BigEndian.Uint64(tx.Bucket(bk).Get(ctr)); return nil })
	if n != 2 {
		t.Errorf("counter = %d, want 2", n)
	}
	if db.Retries() == before {
		t.Error("no retry counted")
	}
}

type inbox struct {
	mu   sync.Mutex
	msgs [][]byte // nil entries: resyncs
}

func (in *inbox) fn(m []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if m == nil {
		in.msgs = append(in.msgs, nil)
		return
	}
	in.msgs = append(in.msgs, bytes.Clone(m))
}

func (in *inbox) snapshot() [][]byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([][]byte(nil), in.msgs...)
}

func (in *inbox) has(m []byte) bool {
	for _, x := range in.snapshot() {
		if (m == nil && x == nil) || (m != nil && x != nil && bytes.Equal(x, m)) {
			return true
		}
	}
	return false
}

func TestNotify(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := pg.NewDatabase(t)
	a := openDB(t, Options{DSN: dsn})
	b := openDB(t, Options{DSN: dsn})
	var inA, inB inbox
	a.Subscribe(inA.fn, 100*time.Millisecond)
	b.Subscribe(inB.fn, 100*time.Millisecond)
	ctx := context.Background()
	bin := []byte{0x00, 0xff, 0xfe, 'x', 0x00}
	long := bytes.Repeat([]byte("é"), MaxMessage/2)
	msgs := [][]byte{[]byte("hello"), bin, long}
	for i := range 20 {
		msgs = append(msgs, fmt.Appendf(nil, "m%02d", i))
	}
	for _, m := range msgs {
		if err := a.Publish(ctx, m); err != nil {
			t.Fatalf("Publish %d bytes: %v", len(m), err)
		}
	}
	for name, in := range map[string]*inbox{"other node": &inB, "publisher": &inA} {
		eventually(t, 5*time.Second, "messages reach the "+name, func() bool { return len(in.snapshot()) >= len(msgs) })
		got := in.snapshot()
		for i, m := range msgs {
			if !bytes.Equal(got[i], m) {
				t.Errorf("%s: message %d = %q, want %q", name, i, got[i], m)
			}
		}
	}
	if err := a.Publish(ctx, make([]byte, MaxBinaryMessage+1)); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("Publish of an oversize binary message: %v", err)
	}
	if err := a.Publish(ctx, bytes.Repeat([]byte("x"), MaxMessage+1)); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("Publish of an oversize message: %v", err)
	}
	// Several re-checks pass without a false resync.
	r, checks := b.Resyncs(), b.rechecks.Load()
	eventually(t, 5*time.Second, "three re-checks", func() bool { return b.rechecks.Load() >= checks+3 })
	if b.Resyncs() != r || inB.has(nil) {
		t.Errorf("resync without a loss: %v", inB.snapshot())
	}
}

func TestNotifyResync(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := pg.NewDatabase(t)
	a := openDB(t, Options{DSN: dsn})
	b := openDB(t, Options{DSN: dsn, RecheckInterval: 100 * time.Millisecond})
	var in inbox
	b.Subscribe(in.fn, 0)

	// A lost notification: a number taken without its NOTIFY.
	if _, err := a.pool.Exec(context.Background(), `SELECT nextval('registryd_published')`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "fn(nil) after a lost message", func() bool { return in.has(nil) })
	if b.Resyncs() != 1 {
		t.Errorf("Resyncs = %d", b.Resyncs())
	}

	// The listener's connection is killed: fn(nil) after the reconnect,
	// and messages flow again.
	in.mu.Lock()
	in.msgs = nil
	in.mu.Unlock()
	if err := pg.ExecIn(dbName(t, dsn), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = 'registryd-listen' AND datname = current_database()`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "fn(nil) after the listener was killed", func() bool { return in.has(nil) })
	if err := a.Publish(context.Background(), []byte("after")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a message after the reconnect", func() bool { return in.has([]byte("after")) })
}

// lockWaiters counts the backends of the database waiting for an advisory
// lock.
func lockWaiters(t testing.TB, db *DB) int {
	var n int
	if err := db.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLock(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := pg.NewDatabase(t)
	a := openDB(t, Options{DSN: dsn})
	b := openDB(t, Options{DSN: dsn})
	ctx := context.Background()

	unlockA, err := a.Lock(ctx, "fill:/org/x.jar")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.TryLock(ctx, "fill:/org/x.jar"); ok || err != nil {
		t.Fatalf("TryLock while held elsewhere: %v, %v", ok, err)
	}
	// Another name is another lock.
	unlockOther, ok, err := b.TryLock(ctx, "fill:/org/y.jar")
	if !ok || err != nil {
		t.Fatalf("TryLock of another name: %v, %v", ok, err)
	}
	unlockOther()
	// A Lock whose ctx ends gives up.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := b.Lock(short, "fill:/org/x.jar"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with an expiring ctx = %v", err)
	}
	cancel()
	eventually(t, 5*time.Second, "the cancelled waiter leaves the queue", func() bool { return lockWaiters(t, a) == 0 })

	got := make(chan func(), 1)
	go func() {
		u, err := b.Lock(ctx, "fill:/org/x.jar")
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- u
	}()
	eventually(t, 5*time.Second, "b waits for the lock", func() bool { return lockWaiters(t, a) == 1 })
	select {
	case <-got:
		t.Fatal("b got the lock while a held it")
	default:
	}
	unlockA()
	unlockA() // safe twice
	var unlockB func()
	select {
	case unlockB = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("b did not get the lock after a released it")
	}
	if unlockB == nil {
		t.FailNow()
	}
	if _, ok, _ := a.TryLock(ctx, "fill:/org/x.jar"); ok {
		t.Error("a's TryLock succeeded while b holds the lock")
	}
	if n := b.LocksHeld(); n != 1 {
		t.Errorf("b.LocksHeld = %d", n)
	}
	unlockB()
	u, ok, err := a.TryLock(ctx, "fill:/org/x.jar")
	if !ok || err != nil {
		t.Fatalf("TryLock after release: %v %v", ok, err)
	}
	u()
	if a.LocksHeld() != 0 || b.LocksHeld() != 0 {
		t.Errorf("locks held: %d %d", a.LocksHeld(), b.LocksHeld())
	}
}

// TestLockLostWithConnection: PostgreSQL releases the lock of a connection
// that dies, at once.
func TestLockLostWithConnection(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := pg.NewDatabase(t)
	a := openDB(t, Options{DSN: dsn})
	b := openDB(t, Options{DSN: dsn})
	ctx := context.Background()
	unlockA, err := a.Lock(ctx, "job:cleanup")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.ExecIn(dbName(t, dsn), `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	unlockB, err := b.Lock(lctx, "job:cleanup")
	if err != nil {
		t.Fatalf("Lock after the holder's connection died: %v", err)
	}
	unlockA() // the dead holder's unlock is harmless
	if _, ok, _ := a.TryLock(ctx, "job:cleanup"); ok {
		t.Error("a's late unlock released b's lock")
	}
	unlockB()
	// a's lock pool replaced the dead connection.
	u, ok, err := a.TryLock(ctx, "job:cleanup")
	if !ok || err != nil {
		t.Fatalf("a.TryLock: %v %v", ok, err)
	}
	u()
}

func TestLockReleasedByClose(t *testing.T) {
	pg := testsvc.Postgres(t)
	dsn := pg.NewDatabase(t)
	a, err := Open(context.Background(), Options{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	b := openDB(t, Options{DSN: dsn})
	if _, err := a.Lock(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, ok, err := b.TryLock(context.Background(), "x"); !ok || err != nil {
		t.Fatalf("TryLock after the holder closed: %v %v", ok, err)
	}
}

func benchDB(b *testing.B) *DB {
	pg := testsvc.Postgres(b)
	return openDB(b, Options{DSN: pg.NewDatabase(b)})
}

func BenchmarkGet(b *testing.B) {
	db := benchDB(b)
	db.Update(func(tx kv.Tx) error {
		bu, _ := tx.CreateBucketIfNotExists(bk)
		return bu.Put([]byte("key"), bytes.Repeat([]byte("v"), 200))
	})
	b.ResetTimer()
	for b.Loop() {
		if err := db.View(func(tx kv.Tx) error {
			if tx.Bucket(bk).Get([]byte("key")) == nil {
				return errors.New("missing")
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPutCommit(b *testing.B) {
	db := benchDB(b)
	db.Update(func(tx kv.Tx) error { _, err := tx.CreateBucketIfNotExists(bk); return err })
	v := bytes.Repeat([]byte("v"), 200)
	i := 0
	for b.Loop() {
		i++
		k := binary.BigEndian.AppendUint64(nil, uint64(i))
		if err := db.Update(func(tx kv.Tx) error { return tx.Bucket(bk).Put(k, v) }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCursorWalk10k(b *testing.B) {
	db := benchDB(b)
	v := bytes.Repeat([]byte("v"), 100)
	db.Update(func(tx kv.Tx) error {
		bu, _ := tx.CreateBucketIfNotExists(bk)
		for i := range 10000 {
			if err := bu.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), v); err != nil {
				return err
			}
		}
		return nil
	})
	for b.Loop() {
		n := 0
		db.View(func(tx kv.Tx) error {
			c := tx.Bucket(bk).Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				n++
			}
			return nil
		})
		if n != 10000 {
			b.Fatalf("walked %d", n)
		}
	}
}
