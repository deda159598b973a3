package cleanup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"registryd/internal/fakecluster"
	"registryd/store"
)

// clusterStore is the env's store as one node of a fake cluster: its
// leases are the broker's, which the test also holds for "another node".
type clusterStore struct {
	*store.Store
	n *fakecluster.Node
}

func (c clusterStore) TryLease(ctx context.Context, key string) (func(), bool, error) {
	unlock, ok, err := c.n.TryLock(ctx, key)
	if !ok {
		unlock = func() {}
	}
	return unlock, ok, err
}

func newClusterStore(t *testing.T, e *env) (clusterStore, *fakecluster.Broker) {
	b := fakecluster.New()
	t.Cleanup(b.Close)
	return clusterStore{Store: e.st, n: b.Node("a")}, b
}

// TestCheckOncePerCluster: a check finds the check's lease held by another
// node: it skips (counted), and runs once the lease is free, giving it back.
func TestCheckOncePerCluster(t *testing.T) {
	e := newEnv(t, 10)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	cs, b := newClusterStore(t, e)
	s := e.scheduler(4, cs)
	e.clock.Advance(20 * day) // due, cutoff t0+10d

	release := b.Hold("job:cleanup", "node-b")
	s.Tick()
	if len(e.gone(e.a)) != 0 {
		t.Fatal("a check ran while another node held the check's lease")
	}
	if got := e.metric("registryd_cluster_job_skipped_total", "job", "cleanup"); got != 1 {
		t.Fatalf("skipped = %v", got)
	}
	release()
	s.Tick()
	e.wantOddGone()
	if h := b.Holder("job:cleanup"); h != "" {
		t.Fatalf("the check's lease is still held by %q", h)
	}
	if h := b.Holder("cleanup:" + strconv.FormatInt(e.acme.ID, 10)); h != "" {
		t.Fatalf("the group's claim is still held by %q", h)
	}
}

// TestClaimIsClusterWide: while another node runs a group's policy (it
// holds the group's claim), RunNow here answers "running" and a check does
// not resume the run; once that node is gone (its lease released at once),
// a check resumes it.
func TestClaimIsClusterWide(t *testing.T) {
	e := newEnv(t, 10)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{}))
	cs, b := newClusterStore(t, e)
	s := e.scheduler(3, cs)
	e.clock.Advance(20 * day)

	// Node B claims the group and starts its run (an admin's RunNow there).
	release := b.Hold("cleanup:"+strconv.FormatInt(e.acme.ID, 10), "node-b")
	must[store.CleanupPolicy](t)(e.st.StartCleanupRun(e.acme.ID, store.CleanupStart{AuthorID: 1, AuthorName: "Administrator"}))

	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); !errors.Is(err, store.ErrCleanupRunning) {
		t.Fatalf("RunNow while another node runs the policy: %v", err)
	}
	s.Tick()
	if len(e.gone(e.a)) != 0 {
		t.Fatal("a check resumed a run another node is executing")
	}
	// This node can still run other groups' policies meanwhile.
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.other.ID, store.CleanupPolicyPatch{}))
	if _, err := s.RunNow(e.other.ID, 1, "Administrator"); err != nil {
		t.Fatal(err)
	}
	s.Wait()

	if got := e.gone(e.o); len(got) != e.n {
		t.Fatalf("the other group's run deleted %v", got)
	}

	release() // node B died
	s.Tick()
	var odd []int
	for i := 1; i < e.n; i += 2 {
		odd = append(odd, i)
	}
	for _, u := range []int64{e.a, e.b} {
		if got := e.gone(u); fmt.Sprint(got) != fmt.Sprint(odd) {
			t.Fatalf("upstream %d: gone %v, want %v", u, got, odd)
		}
	}
	p := must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupScheduled || p.Run != nil {
		t.Fatalf("not resumed: %+v", p)
	}
}

// TestClaimLeaseError: an index that cannot grant leases fails RunNow
// with its error and leaves nothing claimed.
func TestClaimLeaseError(t *testing.T) {
	e := newEnv(t, 4)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{}))
	cs, _ := newClusterStore(t, e)
	s := e.scheduler(3, cs)
	cs.n.FailLocks(true)
	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); !errors.Is(err, fakecluster.ErrDown) {
		t.Fatalf("RunNow: %v", err)
	}
	cs.n.FailLocks(false)
	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); err != nil {
		t.Fatalf("RunNow after the index is back: %v", err)
	}
	s.Wait()
}
