// Package cleanup runs the groups' cache cleanup policies (GitLab's
// virtual registry cleanup policies): every cleanup.check_interval it starts
// the runs that are due, one after another, and resumes the runs a crash or
// a stop cut short; admins may also start a run at once (RunNow). A run
// deletes, batch after batch, the group's cache entries not downloaded for
// keep_n_days_after_download days (store.CleanupRunBatch), then records its
// figures on the policy, writes an audit event and schedules the next run.
//
// What a run deletes is marked for destruction exactly as an admin's delete
// is; the proxy's collector removes the entries and their blobs. So a run is
// index work only, in small transactions with a pause after each: hits read
// the index without waiting for it, and fills wait at most for one batch.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/clusterjob"
	"registryd/internal/every"
	"registryd/store"
)

// Store is what the scheduler needs of the index; *store.Store has it.
type Store interface {
	CleanupPolicies() ([]store.CleanupPolicy, error)
	StartCleanupRun(group int64, how store.CleanupStart) (store.CleanupPolicy, error)
	CleanupRunBatch(group int64, limit int) (store.CleanupBatch, error)
	FinishCleanupRun(group int64, failure string) (store.CleanupPolicy, store.CleanupRun, error)
	Group(id int64) (store.Group, error)
	CleanupPolicy(group int64) (store.CleanupPolicy, error)
	RecordAudit(evs ...store.AuditEvent) ([]store.AuditEvent, error)
	// TryLease takes a cluster-wide lease (store.Store.TryLease): the
	// check runs once per cluster, and a group's run on one node at a time.
	TryLease(ctx context.Context, key string) (unlock func(), ok bool, err error)
}

// Options configure a Scheduler. Zero fields take the defaults below,
// which are registryd's (config.Default).
type Options struct {
	// Store is the index. Required.
	Store Store
	// CheckInterval is how often the scheduler looks for policies that are
	// due, and for runs a crash or a stop cut short (cleanup.check_interval).
	// Default 1m.
	CheckInterval time.Duration
	// BatchSize is how many cache entries one transaction of a run deletes
	// at most (cleanup.batch_size). Default 500.
	BatchSize int
	// RunNowInterval is the shortest time between the start of a group's
	// last run and a run now (cleanup.run_now_interval): one asked for
	// sooner is a *store.CleanupTooSoonError. Default 1m; negative sets no
	// bound.
	RunNowInterval time.Duration
	// Now is the clock that says which policies are due; it should be the
	// store's (store.Options.Now). Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// Registerer receives the cleanup metrics; nil registers none.
	Registerer prometheus.Registerer
	// BeforeRun, when set, runs before a run selects entries: the proxy's
	// flush of the download counts it keeps in memory, so that a file
	// downloaded a moment ago counts as downloaded. A failure is logged and
	// the run goes on (the counts are at most a flush interval old).
	BeforeRun func() error
	// Rest is the pause after each batch, as a multiple of the time the
	// batch took: 1 (the default) leaves the database to hits and fills at
	// least half of the time whatever the size of the run. Negative: no
	// pause (tests).
	Rest float64
}

// MaxConcurrentRuns is how many runs go on at once at most (GitLab's
// ExecutePolicyWorker capacity); more wait for a slot.
const MaxConcurrentRuns = 2

// ErrStopped refuses RunNow once the scheduler is stopping.
var ErrStopped = errors.New("the cleanup scheduler is stopped")

// failureMessage is the policy's failure_message of a run that a storage
// error ended. The error itself goes to the log only: it may name files of
// the data directory, which the API does not show.
const failureMessage = "Failed to execute cleanup policy: the index could not be updated (the registryd log has the cause)"

// Scheduler runs cleanup policies.
type Scheduler struct {
	st        Store
	check     time.Duration // Options.CheckInterval
	batchSize int           // Options.BatchSize
	runNowMin time.Duration // Options.RunNowInterval; 0: no bound
	now       func() time.Time
	log       *slog.Logger
	met       *metrics
	beforeRun func() error
	rest      float64

	mu      sync.Mutex
	active  map[int64]bool   // groups whose run this process executes (or is about to)
	leases  map[int64]func() // the cluster-wide claims of active groups (their unlocks)
	started bool
	stopped bool
	stop    chan struct{}
	loop    sync.WaitGroup // the check loop
	runs    sync.WaitGroup // runs started by RunNow
	slots   chan struct{}

	// afterBatch, set by tests, runs after each committed batch.
	afterBatch func(store.CleanupBatch)
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Minute
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.RunNowInterval == 0 {
		o.RunNowInterval = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Rest == 0 {
		o.Rest = 1
	}
	return o
}

// New returns a scheduler; Start starts its checks.
func New(o Options) (*Scheduler, error) {
	if o.Store == nil {
		return nil, errors.New("cleanup: no store")
	}
	o = o.withDefaults()
	met, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Scheduler{st: o.Store, check: o.CheckInterval, batchSize: o.BatchSize, runNowMin: max(o.RunNowInterval, 0), now: o.Now, log: o.Logger, met: met, beforeRun: o.BeforeRun,
		rest: max(o.Rest, 0), active: map[int64]bool{}, leases: map[int64]func(){}, stop: make(chan struct{}),
		slots: make(chan struct{}, MaxConcurrentRuns)}, nil
}

// Start checks for due policies at once (which also resumes the runs that
// the last process left unfinished) and then every check interval, until
// Stop.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return
	}
	s.started = true
	s.loop.Add(1)
	go func() {
		defer s.loop.Done()
		every.TickNow(s.stop, s.check, s.Tick)
	}()
}

// Stop stops the checks and waits for the runs in progress to reach the end
// of their current batch. A run stopped there stays "running" in the store,
// with its progress, and the next start resumes it.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.loop.Wait()
	s.runs.Wait()
}

// Wait waits for the runs started by RunNow to end (tests, tools).
func (s *Scheduler) Wait() { s.runs.Wait() }

func (s *Scheduler) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// claim reserves the group's run for this process; false when it already
// has it, or another node of the cluster does. A claim comes before the
// store marks the policy running, so that a check seeing a running policy
// that nobody claimed knows the run was cut short by an earlier process (a
// node that dies loses its claims at once).
func (s *Scheduler) claim(group int64) (bool, error) {
	s.mu.Lock()
	if s.active[group] {
		s.mu.Unlock()
		return false, nil
	}
	s.active[group] = true
	s.mu.Unlock()
	return s.claimCluster(group)
}

// claimCluster takes the cluster-wide lease of a group this process has
// claimed (see claim); on false or an error the local claim is released.
func (s *Scheduler) claimCluster(group int64) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseTimeout)
	defer cancel()
	unlock, ok, err := s.st.TryLease(ctx, "cleanup:"+strconv.FormatInt(group, 10))
	if err != nil || !ok {
		s.release(group)
		return false, err
	}
	s.mu.Lock()
	s.leases[group] = unlock
	s.mu.Unlock()
	return true, nil
}

func (s *Scheduler) release(group int64) {
	s.mu.Lock()
	unlock := s.leases[group]
	delete(s.leases, group)
	delete(s.active, group)
	s.mu.Unlock()
	if unlock != nil {
		unlock()
	}
}

// leaseTimeout bounds a request for a cluster lease.
const leaseTimeout = 10 * time.Second

// jobCleanup names the check's cluster-wide lease ("job:cleanup").
const jobCleanup = "cleanup"

// Tick runs, one after another and before it returns, the runs a check
// finds: the policies left running by an earlier process (resumed) and the
// policies that are due (enabled, not running, next_run_at passed). The
// check loop calls it; tests call it directly.
//
// On a cluster the check runs on one node at a time (the lease
// "job:cleanup", held for the whole check): a node that finds it held
// skips this check, another node is making it.
func (s *Scheduler) Tick() {
	unlock, run, err := clusterjob.Try(s.st, jobCleanup, s.met.skipped, s.log)
	if err != nil {
		s.log.Error("cleanup: taking the check's cluster lease", "err", err)
		return
	}
	if !run {
		return
	}
	defer unlock()
	policies, err := s.st.CleanupPolicies()
	if err != nil {
		s.log.Error("cleanup: listing the policies", "err", err)
		return
	}
	now := s.now()
	for _, p := range policies {
		if s.stopping() {
			return
		}
		var how store.CleanupStart
		switch {
		case p.Status == store.CleanupRunning:
			how.Resume = true
		case p.Runnable(now):
			how.Due = true
		default:
			continue
		}
		if ok, err := s.claim(p.GroupID); err != nil {
			s.log.Error("cleanup: claiming a run", "group", p.GroupID, "err", err)
			continue
		} else if !ok {
			continue // a run of this process (RunNow), or of another node, has it
		}
		started, err := s.st.StartCleanupRun(p.GroupID, how)
		switch {
		case errors.Is(err, store.ErrCleanupNotDue), errors.Is(err, store.ErrCleanupRunning),
			errors.Is(err, store.ErrNotFound):
			// Changed since the list was read (disabled, deleted, run).
			s.release(p.GroupID)
			continue
		case err != nil:
			s.release(p.GroupID)
			s.log.Error("cleanup: starting a run", "group", p.GroupID, "err", err)
			continue
		}
		if how.Resume {
			s.log.Info("cleanup: resuming a run cut short", "group", p.GroupID,
				"deleted_entries", started.Run.DeletedEntries, "started_at", started.Run.StartedAt)
		}
		s.execute(started)
	}
}

// RunNow starts a run of the group's policy at once, whatever its schedule
// and its enabled switch, and returns the policy as the run starts
// (status "running"); the run goes on in the background. A policy that is
// running gets store.ErrCleanupRunning; then, with cleanup.run_now_interval
// set, a policy whose last run (scheduled or manual) started less than that
// ago gets a *store.CleanupTooSoonError; no policy, a not-found error.
//
// The interval counts from the start recorded in the index, so it holds
// across restarts and for every node of a cluster. A refusal costs one read
// of the index: no cluster lease, no write.
func (s *Scheduler) RunNow(group, authorID int64, authorName string) (store.CleanupPolicy, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return store.CleanupPolicy{}, ErrStopped
	}
	if s.active[group] {
		s.mu.Unlock()
		return store.CleanupPolicy{}, store.ErrCleanupRunning
	}
	s.active[group] = true
	s.runs.Add(1)
	s.mu.Unlock()
	if err := s.runNowAllowed(group); err != nil {
		s.release(group)
		s.runs.Done()
		return store.CleanupPolicy{}, err
	}
	// Another node's run of the policy (its scheduler's, or an admin's
	// there) holds the group's cluster-wide claim.
	if ok, err := s.claimCluster(group); !ok {
		s.runs.Done()
		if err != nil {
			return store.CleanupPolicy{}, err
		}
		return store.CleanupPolicy{}, store.ErrCleanupRunning
	}
	// The store checks the interval again, in the transaction that starts
	// the run: two nodes asked at once start one run.
	p, err := s.st.StartCleanupRun(group, store.CleanupStart{AuthorID: authorID, AuthorName: authorName,
		MinInterval: s.runNowMin})
	if err != nil {
		s.release(group)
		s.runs.Done()
		return p, err
	}
	go func() {
		defer s.runs.Done()
		s.execute(p)
	}()
	return p, nil
}

// runNowAllowed is RunNow's first look at the policy, before it takes the
// group's cluster lease: a running policy is store.ErrCleanupRunning, one
// whose last run started within cleanup.run_now_interval a
// *store.CleanupTooSoonError. Without an interval it reads nothing.
func (s *Scheduler) runNowAllowed(group int64) error {
	if s.runNowMin <= 0 {
		return nil
	}
	p, err := s.st.CleanupPolicy(group)
	if err != nil {
		return err
	}
	if p.Status == store.CleanupRunning {
		return store.ErrCleanupRunning
	}
	return p.TooSoon(s.now(), s.runNowMin)
}

// execute carries out the started run of p and releases its claim.
func (s *Scheduler) execute(p store.CleanupPolicy) {
	group := p.GroupID
	defer s.release(group)
	select {
	case s.slots <- struct{}{}:
	case <-s.stop:
		return // still "running" in the store: the next start resumes it
	}
	defer func() { <-s.slots }()
	s.met.inProgress.Inc()
	defer s.met.inProgress.Dec()

	if s.beforeRun != nil {
		if err := s.beforeRun(); err != nil {
			s.log.Warn("cleanup: flushing download counts before a run", "group", group, "err", err)
		}
	}
	start := time.Now()
	run := *p.Run
	var failure error
	for {
		if s.stopping() {
			s.met.runs.WithLabelValues("interrupted").Inc()
			s.log.Info("cleanup: run stopped; the next start resumes it", "group", group,
				"deleted_entries", run.DeletedEntries, "deleted_bytes", run.DeletedSize)
			return
		}
		batchStart := time.Now()
		b, err := s.st.CleanupRunBatch(group, s.batchSize)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrCleanupNotRunning) {
			s.ended(p, run, "deleted", "")
			return
		}
		if err != nil {
			failure = err
			break
		}
		run = b.Run
		s.met.entries.Add(float64(b.Entries))
		s.met.bytes.Add(float64(b.Bytes))
		if s.afterBatch != nil {
			s.afterBatch(b)
		}
		if b.Done {
			break
		}
		if rest := time.Duration(s.rest * float64(time.Since(batchStart))); rest > 0 {
			t := time.NewTimer(rest)
			select {
			case <-t.C:
			case <-s.stop:
				t.Stop()
			}
		}
	}
	msg := ""
	if failure != nil {
		msg = failureMessage
		s.log.Error("cleanup: run failed", "group", group, "err", failure,
			"deleted_entries", run.DeletedEntries, "deleted_bytes", run.DeletedSize)
	}
	done, finished, err := s.st.FinishCleanupRun(group, msg)
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrCleanupNotRunning):
		s.ended(p, run, "deleted", "")
		return
	case err != nil:
		// Left "running": the next check resumes the run, whose batches
		// find nothing more to delete, and records it then.
		s.log.Error("cleanup: recording the end of a run", "group", group, "err", err)
		return
	}
	outcome := "success"
	if failure != nil {
		outcome = "failed"
	}
	s.log.Info("cleanup: run finished", "group", group, "outcome", outcome, "deleted_entries", finished.DeletedEntries,
		"deleted_bytes", finished.DeletedSize, "cutoff", finished.Cutoff, "next_run_at", done.NextRunAt,
		"dur", time.Since(start))
	s.ended(done, finished, outcome, done.FailureMessage)
}

// ended counts a run's end and writes its audit event.
func (s *Scheduler) ended(p store.CleanupPolicy, run store.CleanupRun, outcome, failure string) {
	s.met.runs.WithLabelValues(outcome).Inc()
	ev := store.AuditEvent{
		EventName:     store.AuditCleanupPolicyRun,
		AuthorName:    "registryd",
		EntityID:      p.GroupID,
		EntityType:    store.AuditEntityGroup,
		TargetID:      p.GroupID,
		TargetType:    store.AuditTargetCleanupPolicy,
		TargetDetails: "cleanup policy of group " + fmt.Sprint(p.GroupID),
		Message:       runMessage(p, run, outcome, failure),
	}
	if run.Manual && run.AuthorID != 0 {
		ev.AuthorID, ev.AuthorName, ev.AuthorClass = run.AuthorID, run.AuthorName, store.AuditAuthorClassUser
	}
	if g, err := s.st.Group(p.GroupID); err == nil {
		ev.EntityPath = g.FullPath
		ev.TargetDetails = "cleanup policy of group " + g.FullPath
	}
	if _, err := s.st.RecordAudit(ev); err != nil {
		s.log.Error("cleanup: recording the audit event of a run", "group", p.GroupID, "err", err)
	}
}

// runMessage is the audit event's message: what the run did, in figures.
func runMessage(p store.CleanupPolicy, run store.CleanupRun, outcome, failure string) string {
	kind := "Scheduled cleanup policy run"
	if run.Manual {
		kind = "Cleanup policy run asked for by " + run.AuthorName
	}
	figures := fmt.Sprintf("deleted %d cache entries (%d bytes) last downloaded before %s",
		run.DeletedEntries, run.DeletedSize, run.Cutoff.UTC().Format("2006-01-02T15:04:05.000Z"))
	if run.Resumed > 0 {
		figures += fmt.Sprintf(", resumed %d times after an interruption", run.Resumed)
	}
	switch outcome {
	case "success":
		return fmt.Sprintf("%s: %s; next run at %s", kind, figures, p.NextRunAt.UTC().Format("2006-01-02T15:04:05.000Z"))
	case "deleted":
		return fmt.Sprintf("%s stopped, the policy was deleted: %s", kind, figures)
	}
	return fmt.Sprintf("%s failed: %s; %s", kind, figures, failure)
}

// metrics of the cleanup runs.
type metrics struct {
	skipped    *clusterjob.Skipped
	runs       *prometheus.CounterVec
	entries    prometheus.Counter
	bytes      prometheus.Counter
	inProgress prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "cleanup", Name: "runs_total",
			Help: "Cleanup policy runs by outcome: success, failed, interrupted (stopped, resumed at the next start), deleted (the policy was deleted during the run).",
		}, []string{"outcome"}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "cleanup", Name: "deleted_entries_total",
			Help: "Cache entries deleted by cleanup policy runs (marked for destruction; the collector removes them).",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "cleanup", Name: "deleted_bytes_total",
			Help: "Size of the cache entries deleted by cleanup policy runs.",
		}),
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "cleanup", Name: "runs_in_progress",
			Help: "Cleanup policy runs in progress.",
		}),
	}
	for _, o := range []string{"success", "failed", "interrupted", "deleted"} {
		m.runs.WithLabelValues(o)
	}
	var err error
	if m.skipped, err = clusterjob.NewSkipped(reg, jobCleanup); err != nil {
		return nil, err
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.runs, m.entries, m.bytes, m.inProgress} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
