package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store/kv"
	"registryd/store/kv/boltkv"
)

// testKey seals passwords in tests; otherKey is a different installation's key.
var (
	testKey  = bytes.Repeat([]byte{0x42}, 32)
	otherKey = bytes.Repeat([]byte{0x24}, 32)
)

// newClock is a test clock standing at a fixed instant.
func newClock() *testclock.Clock {
	return testclock.New(time.Date(2026, 3, 14, 9, 26, 53, 589_793_238, time.UTC))
}

// testEngines are the kv engines the store tests can run on besides bbolt
// (boltAt: DIR/registry.db, as cmd opens it), by the value of REGISTRYD_TEST_STORE
// that selects them; a file of the test binary registers its engine in an
// init function. Contract of a hook:
//
//   - hook(t, dir) returns a newly opened kv.DB for the data directory
//     dir. The store it is passed to owns it: Store.Close (or a failed
//     Open) closes it.
//   - Called again with the same dir, it returns a new engine on the same
//     data: a test that closes its store and opens dir again (a restart, or
//     another key on the same database) must find what it wrote. A dir it
//     has not seen means a new, empty database.
//   - It may be called while an earlier engine for dir is still open.
//   - What outlives the engines (a database, a server) is cleaned up by the
//     hook itself with t.Cleanup.
//
// Tests that only make sense on bbolt (file copies, flock) call boltOnly.
var testEngines = map[string]func(t testing.TB, dir string) kv.DB{}

// testEngine is the hook of the engine REGISTRYD_TEST_STORE selects, nil
// for bbolt ("" or "bolt"); another value fails the test. The variable is
// read here, while a test runs, and not in an init function: go test's
// cache key includes only the environment variables a test reads after
// the testing package started logging them, so a variable read in init
// would let `REGISTRYD_TEST_STORE=postgres go test` be answered from the
// cache of a bbolt run.
func testEngine(t testing.TB) func(t testing.TB, dir string) kv.DB {
	t.Helper()
	name := os.Getenv("REGISTRYD_TEST_STORE")
	if name == "" || name == "bolt" {
		return nil
	}
	hook, ok := testEngines[name]
	if !ok {
		t.Fatalf("REGISTRYD_TEST_STORE=%q: no such test engine (bolt or postgres)", name)
	}
	return hook
}

// openAt opens the store of data dir dir with o, on testEngine when set:
// every test that opens a store goes through it.
func openAt(t testing.TB, dir string, o Options) (*Store, error) {
	t.Helper()
	if o.Engine == nil {
		if engine := testEngine(t); engine != nil {
			o.Engine = engine(t, dir)
		} else {
			db, err := boltAt(dir, time.Second)
			if err != nil {
				return nil, err
			}
			o.Engine = db
		}
	}
	return Open(o)
}

// boltAt opens the bbolt engine of data dir dir, DIR/registry.db, creating
// dir when needed, waiting at most timeout for another process's lock.
func boltAt(dir string, timeout time.Duration) (*boltkv.DB, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	return boltkv.Open(filepath.Join(dir, "registry.db"), boltkv.Options{Timeout: timeout, AppendMostly: appendMostly})
}

// boltOnly skips t when the tests run on another engine, saying why.
func boltOnly(t testing.TB, why string) {
	t.Helper()
	if testEngine(t) != nil {
		t.Skip("bbolt only: " + why)
	}
}

// openTest opens a fresh store in a temp dir with the test key and clock.
func openTest(t *testing.T) (*Store, *testclock.Clock) {
	t.Helper()
	c := newClock()
	s, err := openAt(t, t.TempDir(), Options{SecretKey: testKey, Now: c.Now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	closeChecked(t, s)
	return s, c
}

// closeChecked closes s when t ends, after checking that whatever the test
// did, the key counts equal the keys (unless the test closed the store or
// broke its engine itself: no View then).
func closeChecked(t testing.TB, s *Store) {
	t.Cleanup(func() {
		if drift, err := countDrift(s); err == nil && drift != "" {
			t.Error(drift)
		}
		s.Close()
	})
}

// ok fails the test on err and otherwise returns v: ok(s.Thing(...))(t).
func ok[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// topGroup creates a top-level group.
func topGroup(t testing.TB, s *Store, path string) Group {
	t.Helper()
	return ok(s.CreateGroup(NewGroup{Name: path, Path: path}))(t)
}

// user creates a user named name.
func user(t testing.TB, s *Store, name string) User {
	t.Helper()
	return ok(s.CreateUser(NewUser{Username: name, Name: name, Email: name + "@example.com"}))(t)
}

// up creates an upstream with url under registry.
func up(t testing.TB, s *Store, registry int64, url string) PositionedUpstream {
	t.Helper()
	return ok(s.CreateUpstream(registry, NewUpstream{URL: url, Name: url}))(t)
}

// upstreamOrder is the registry's upstream ids in position order, checking on the way
// that positions are exactly 1..n.
func upstreamOrder(t testing.TB, s *Store, registry int64) []int64 {
	t.Helper()
	list := ok(s.RegistryUpstreams(registry))(t)
	ids := make([]int64, 0, len(list))
	for i, u := range list {
		if u.Assoc.Position != i+1 {
			t.Fatalf("registry %d: upstream %d at position %d, want %d (positions must stay 1..n)",
				registry, u.ID, u.Assoc.Position, i+1)
		}
		ids = append(ids, u.ID)
	}
	return ids
}

func wantOrder(t testing.TB, s *Store, registry int64, want ...int64) {
	t.Helper()
	got := upstreamOrder(t, s, registry)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("registry %d order = %v, want %v", registry, got, want)
	}
}

// wantValidation fails unless err is a *ValidationError with msg on field.
func wantValidation(t testing.TB, err error, field, msg string) {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T), want a ValidationError on %s", err, err, field)
	}
	for _, m := range ve.Fields[field] {
		if m == msg {
			return
		}
	}
	t.Fatalf("validation = %v, want %s: %q", ve.Fields, field, msg)
}

// snapshot is every key, value and sequence of every bucket, to prove that a
// failed mutation wrote nothing.
func snapshot(t testing.TB, s *Store) string {
	t.Helper()
	var lines []string
	err := s.db.View(func(tx kv.Tx) error {
		return tx.ForEach(func(name []byte, b kv.Bucket) error {
			lines = append(lines, fmt.Sprintf("%s seq=%d", name, b.Sequence()))
			return b.ForEach(func(k, v []byte) error {
				lines = append(lines, fmt.Sprintf("%s %s=%s", name, hex.EncodeToString(k), hex.EncodeToString(v)))
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// rawContains reports whether any key or value anywhere in the database
// contains needle.
func rawContains(t testing.TB, s *Store, needle []byte) bool {
	t.Helper()
	found := false
	err := s.db.View(func(tx kv.Tx) error {
		return tx.ForEach(func(_ []byte, b kv.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if bytes.Contains(k, needle) || bytes.Contains(v, needle) {
					found = true
				}
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// noErr fails the test on err.
func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
