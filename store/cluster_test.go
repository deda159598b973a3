package store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"registryd/internal/fakecluster"
	"registryd/store/kv"
)

// openClustered opens a fresh store on node n of a fake cluster.
func openClustered(t *testing.T, n *fakecluster.Node, log *slog.Logger) *Store {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := boltAt(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{SecretKey: testKey, Now: newClock().Now, Cluster: n, Logger: log, Engine: db})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newBroker(t *testing.T) *fakecluster.Broker {
	b := fakecluster.New()
	t.Cleanup(b.Close)
	return b
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// delivered waits until node n's subscriber has taken want messages.
func delivered(t *testing.T, n *fakecluster.Node, want int) {
	t.Helper()
	eventually(t, "delivery", func() bool { return n.Delivered() >= want })
}

func collectWanted(s *Store) bool {
	select {
	case <-s.CollectWanted():
		return true
	default:
		return false
	}
}

func TestClusterMessageRoundTrip(t *testing.T) {
	c := change{auth: true, work: true, forget: []int64{1, 300, 1 << 40}}
	node, got, ok := decodeChange(encodeChange(42, c))
	if !ok || node != 42 || !got.auth || got.cache || !got.work || got.forgetAll ||
		len(got.forget) != 3 || got.forget[2] != 1<<40 {
		t.Fatalf("round trip: %v %d %+v", ok, node, got)
	}
	// A list too long for one message forgets every upstream instead.
	many := make([]int64, 5000)
	for i := range many {
		many[i] = int64(i + 1)
	}
	msg := encodeChange(42, change{forget: many})
	if len(msg) > 7900 {
		t.Fatalf("message of %d bytes", len(msg))
	}
	if _, got, ok := decodeChange(msg); !ok || !got.forgetAll || len(got.forget) != 0 {
		t.Fatalf("long list: %+v", got)
	}
	if _, _, ok := decodeChange([]byte{9, 1, 2}); ok {
		t.Fatal("an unknown version decoded")
	}
}

func TestClusterRemoteAuthChange(t *testing.T) {
	b := newBroker(t)
	n := b.Node("a")
	s := openClustered(t, n, nil)
	if !s.Clustered() {
		t.Fatal("not clustered")
	}
	auth, cache, ep := s.AuthGeneration(), s.CacheGeneration(), s.ForgetEpoch(7)
	b.Broadcast(encodeChange(s.cluster.node+1, change{auth: true}))
	eventually(t, "the auth generation", func() bool { return s.AuthGeneration() != auth })
	delivered(t, n, 1)
	if s.CacheGeneration() != cache || s.ForgetEpoch(7) != ep || collectWanted(s) {
		t.Fatal("an auth change moved more than the auth generation")
	}

	b.Broadcast(encodeChange(s.cluster.node+1, change{cache: true, work: true, forget: []int64{7}}))
	delivered(t, n, 2)
	if s.CacheGeneration() == cache || s.ForgetEpoch(7) == ep || s.ForgetEpoch(8) != 0 || !collectWanted(s) {
		t.Fatal("a cache change with forget and work was not applied as sent")
	}
}

func TestClusterPossibleLossBumpsEverything(t *testing.T) {
	b := newBroker(t)
	n := b.Node("a")
	s := openClustered(t, n, nil)
	auth, cache := s.AuthGeneration(), s.CacheGeneration()
	eps := map[int64]uint64{1: s.ForgetEpoch(1), 99: s.ForgetEpoch(99)}
	n.Lost()
	delivered(t, n, 1)
	if s.AuthGeneration() == auth || s.CacheGeneration() == cache {
		t.Fatal("fn(nil) left a generation as it was")
	}
	for id, ep := range eps {
		if s.ForgetEpoch(id) == ep {
			t.Fatalf("fn(nil) left the forget epoch of upstream %d", id)
		}
	}
	if !collectWanted(s) {
		t.Fatal("fn(nil) did not wake the collector")
	}
	// A message this version cannot read counts as a loss too.
	auth = s.AuthGeneration()
	b.Broadcast([]byte{99})
	delivered(t, n, 2)
	if s.AuthGeneration() == auth {
		t.Fatal("an unreadable message was ignored")
	}
}

func TestClusterOwnMessagesIgnored(t *testing.T) {
	b := newBroker(t)
	n := b.Node("a")
	s := openClustered(t, n, nil)
	auth, cache := s.AuthGeneration(), s.CacheGeneration()
	user(t, s, "alice")
	// Bumped at commit, before (and without) the message.
	if s.AuthGeneration() != auth+1 {
		t.Fatalf("auth generation %d after one commit from %d", s.AuthGeneration(), auth)
	}
	eventually(t, "the publish", func() bool { return n.Published() == 1 })
	delivered(t, n, 1) // its own message came back and changed nothing
	if s.AuthGeneration() != auth+1 || s.CacheGeneration() != cache {
		t.Fatal("the node applied its own message")
	}
}

// Two stores on one fake cluster: what one commits moves the other's
// generations (their data differ; only the views' keys are shared here).
func TestClusterCommitReachesOtherNode(t *testing.T) {
	b := newBroker(t)
	na, nb := b.Node("a"), b.Node("b")
	a, other := openClustered(t, na, nil), openClustered(t, nb, nil)

	auth := other.AuthGeneration()
	user(t, a, "alice")
	eventually(t, "the auth change on b", func() bool { return other.AuthGeneration() != auth })

	g := topGroup(t, a, "g")
	r := ok(a.CreateRegistry(g.ID, "r", ""))(t)
	u := up(t, a, r.ID, "https://repo.example/m")
	if _, err := a.PutCacheEntry(CacheEntry{UpstreamID: u.ID, RelativePath: "/x/y/1/y-1.jar",
		SHA256: strings.Repeat("ab", 32), Size: 1}); err != nil {
		t.Fatal(err)
	}
	ep := other.ForgetEpoch(u.ID)
	for collectWanted(other) {
	}
	cache := other.CacheGeneration()
	if err := a.DeleteCacheEntry(u.ID, "/x/y/1/y-1.jar"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the delete on b", func() bool {
		return other.CacheGeneration() != cache && other.ForgetEpoch(u.ID) != ep
	})
	eventually(t, "b's collector woken", func() bool { return collectWanted(other) })
}

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var _ io.Writer = (*logBuf)(nil)

func TestClusterPublishFailureNeverFailsCommit(t *testing.T) {
	b := newBroker(t)
	na, nb := b.Node("a"), b.Node("b")
	var logs logBuf
	a := openClustered(t, na, slog.New(slog.NewTextHandler(&logs, nil)))
	other := openClustered(t, nb, nil)
	na.FailPublish(true)
	auth, otherAuth := a.AuthGeneration(), other.AuthGeneration()
	for _, name := range []string{"alice", "bob", "carol"} {
		user(t, a, name) // each commit succeeds
	}
	if a.AuthGeneration() != auth+3 {
		t.Fatal("the local generation waited for the message")
	}
	eventually(t, "the warning", func() bool { return strings.Contains(logs.String(), "publishing a change") })
	// Retries do not log again while the outage lasts.
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings:\n%s", n, logs.String())
	}
	if other.AuthGeneration() != otherAuth {
		t.Fatal("a failed publish reached the other node")
	}
	// Once the engine takes messages again, the pending change goes out
	// (merged: one message for the three commits).
	na.FailPublish(false)
	eventually(t, "the retried publish", func() bool { return other.AuthGeneration() != otherAuth })
	if na.Published() != 1 {
		t.Fatalf("%d messages for three commits during the outage", na.Published())
	}
}

func TestLeaseWithoutCluster(t *testing.T) {
	boltOnly(t, "a store on a shared engine is clustered")
	s, _ := openTest(t)
	if s.Clustered() {
		t.Fatal("a single store says it is clustered")
	}
	unlock, err := s.Lease(context.Background(), "fill:1:a")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	unlock2, ok, err := s.TryLease(context.Background(), "job:collect")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	// Single node: a second lease of the same key is granted too (the
	// process's own locks serialise there).
	_, ok, _ = s.TryLease(context.Background(), "job:collect")
	if !ok {
		t.Fatal("TryLease refused on a single node")
	}
	unlock2()
}

func TestLeaseOnCluster(t *testing.T) {
	b := newBroker(t)
	n := b.Node("a")
	s := openClustered(t, n, nil)
	release := b.Hold("job:collect", "b")
	if _, ok, err := s.TryLease(context.Background(), "job:collect"); ok || err != nil {
		t.Fatal("TryLease got a lease another node holds", ok, err)
	}
	got := make(chan func())
	go func() {
		unlock, err := s.Lease(context.Background(), "job:collect")
		if err != nil {
			t.Error(err)
		}
		got <- unlock
	}()
	eventually(t, "the wait", func() bool { return b.Waiting("job:collect") == 1 })
	release()
	unlock := <-got
	if b.Holder("job:collect") != "a" {
		t.Fatal("lease not held by this node")
	}
	unlock()
	unlock() // twice is fine
	if b.Holder("job:collect") != "" {
		t.Fatal("lease not released")
	}
	n.FailLocks(true)
	if _, err := s.Lease(context.Background(), "x"); !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("lease error %v", err)
	}
}
