package proxy

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"

	"registryd/auth"
	"registryd/internal/clusterjob"
	"registryd/internal/redact"
	"registryd/maven"
	"registryd/store"
)

// Rule denials are recorded as audit events (GET /audit_events), GitLab's
// virtual_registries_packages_maven_upstream_artifact_denied, off the
// request path: a request queues the event and one goroutine writes queued
// events in batches, one transaction each (store.RecordAudit). A build
// asks for a refused file and its checksums again and again; the same
// (registry, upstream, file, caller) is recorded once per
// denialAuditWindow (the metric counts every refusal). How many events a
// caller or a registry may cause is bounded, and refusals past the bounds
// are counted in aggregate events (audit_limit.go); the writer records
// those every audit.aggregate_interval.

const (
	denialAuditWindow = 10 * time.Minute
	auditQueueLen     = 1024
	auditBatch        = 64
	auditSeenSize     = 1 << 14
)

type auditQueue struct {
	s        *engine
	ch       chan deniedFile
	interval time.Duration // audit.aggregate_interval
	met      *auditMetrics

	mu     sync.Mutex // guards seen, limits and aggs
	seen   *simplelru.LRU[denialKey, time.Time]
	limits auditLimits
	aggs   auditAggregates

	bgMu sync.Mutex
	stop chan struct{}
	done chan struct{}
}

type denialKey struct {
	registry, up int64
	caller       auditCaller
	rel          string
}

func (k denialKey) aggregateKey() aggregateKey {
	return aggregateKey{registry: k.registry, up: k.up, caller: k.caller}
}

// deniedFile is one rule refusal on its way to the store: its own event,
// or its share of an aggregate.
type deniedFile struct {
	key   denialKey
	ev    store.AuditEvent
	upURL string // the upstream's URL without a trailing slash
	rel   string // key.rel as events show it: credentials redacted
}

func newAuditQueue(s *engine, o AuditOptions, reg prometheus.Registerer) (*auditQueue, error) {
	seen, err := simplelru.NewLRU[denialKey, time.Time](auditSeenSize, nil)
	if err != nil {
		return nil, err
	}
	limits, err := newAuditLimits(o.CallerDenialsPerMinute, o.RegistryDenialsPerMinute)
	if err != nil {
		return nil, err
	}
	met, err := newAuditMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &auditQueue{s: s, ch: make(chan deniedFile, auditQueueLen), interval: o.AggregateInterval, met: met, seen: seen,
		limits: limits, aggs: auditAggregates{max: auditAggregatesMax}}, nil
}

// denied records upstream u's rules refusing x's file: as an event of its
// own while the caller's and the registry's budgets allow and the queue
// has room, else in its aggregate.
func (q *auditQueue) denied(x *request, u *upstreamView, v maven.Verdict) {
	now := q.s.now()
	rel := x.path.EntryRel()
	k := denialKey{registry: x.reg.id, up: u.id, caller: callerOf(x), rel: rel}
	q.mu.Lock()
	t, ok := q.seen.Get(k)
	if ok && now.Sub(t) < denialAuditWindow {
		q.mu.Unlock()
		return
	}
	k.rel = strings.Clone(rel) // the key outlives the request
	// Seen at once: from here on the refusal is counted, in an event of
	// its own or in an aggregate. (Two requests racing here may both
	// count one: harmless.)
	q.seen.Add(k, now)
	q.mu.Unlock()

	// What the client wrote (the file, the coordinate a rule matched) is
	// stored redacted: a token pasted into the path must not outlive the
	// request in an event (redact.Text returns a clean string as it is).
	// The key keeps the file as asked, so the window above still works.
	shown := redact.Text(k.rel)
	v.Value = redact.Text(v.Value)
	upURL := strings.TrimSuffix(u.ep.URL, "/")
	r := deniedFile{key: k, upURL: upURL, rel: shown, ev: store.AuditEvent{
		EventName:     store.AuditUpstreamArtifactDenied,
		EntityID:      x.reg.group,
		EntityType:    store.AuditEntityGroup,
		TargetID:      u.id,
		TargetType:    store.AuditTargetMavenUpstream,
		TargetDetails: upURL + "/" + shown,
		Message:       "Blocked package request - " + v.Reason() + " (registry " + strconv.FormatInt(x.reg.id, 10) + ")",
		IPAddress:     remoteIP(x.remote).String(),
		CreatedAt:     now,
	}}
	// GitLab's authors: a user by id; a deploy token as author -2 under
	// its own name; an anonymous caller as -1.
	switch x.who.Kind {
	case auth.PersonalToken:
		r.ev.AuthorID, r.ev.AuthorName, r.ev.AuthorClass = x.who.User.ID, x.who.User.Name, store.AuditAuthorClassUser
	case auth.DeployToken:
		r.ev.AuthorID, r.ev.AuthorName, r.ev.AuthorClass = store.AuditAuthorDeployToken, x.who.Deploy.Name, store.AuditAuthorClassDeployToken
	default:
		r.ev.AuthorID = store.AuditAuthorUnauthenticated
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	reason := q.limits.admit(k.caller, k.registry, now)
	if reason == "" {
		select {
		case q.ch <- r:
			return
		default:
			reason = aggQueueFull
		}
	}
	q.aggregate(r, reason)
}

// remoteIP is the IP of a client's address, as fasthttp's RemoteIP
// reads it: 0.0.0.0 for an address that is not TCP's.
func remoteIP(a net.Addr) net.IP {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP
	}
	return net.IPv4zero
}

// aggregate counts r in its aggregate. Call with q.mu held.
func (q *auditQueue) aggregate(r deniedFile, reason string) {
	q.met.aggregated[reason].Inc()
	if !q.aggs.merge(newAggregate(r)) {
		q.met.unattributed.Inc()
	}
}

// start runs the writer until stopDrain.
func (q *auditQueue) start() {
	q.bgMu.Lock()
	defer q.bgMu.Unlock()
	if q.stop != nil {
		return
	}
	q.stop, q.done = make(chan struct{}), make(chan struct{})
	go q.run(q.stop, q.done)
}

// stopDrain stops the writer, then writes what is queued and the open
// aggregates: whatever a request counted before it returned is recorded
// (a request that outlives it is not).
func (q *auditQueue) stopDrain() {
	q.bgMu.Lock()
	stop, done := q.stop, q.done
	q.stop = nil
	q.bgMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	for batch := q.drain(nil); len(batch) > 0; batch = q.drain(batch[:0]) {
		q.write(batch)
	}
	q.flushAggregates(true)
}

func (q *auditQueue) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(q.interval)
	defer t.Stop()
	batch := make([]deniedFile, 0, auditBatch)
	for {
		select {
		case r := <-q.ch:
			batch = append(batch[:0], r)
		case <-t.C:
			q.flushAggregates(false)
			continue
		case <-stop:
			return
		}
		q.write(q.drain(batch))
	}
}

// drain adds what is queued to batch, up to auditBatch events.
func (q *auditQueue) drain(batch []deniedFile) []deniedFile {
	for len(batch) < auditBatch {
		select {
		case r := <-q.ch:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// write records a batch of single events in one transaction. When the
// write fails, each refusal is counted in its aggregate instead, which the
// next flush writes.
func (q *auditQueue) write(batch []deniedFile) {
	evs := make([]store.AuditEvent, len(batch))
	for i := range batch {
		evs[i] = batch[i].ev
	}
	if err := q.record(evs); err != nil {
		q.s.log.Warn("recording audit events of rule denials; counted in aggregate events instead",
			"events", len(batch), "err", err)
		q.mu.Lock()
		for _, r := range batch {
			q.aggregate(r, aggWriteFailed)
		}
		q.mu.Unlock()
	}
}

// flushAggregates writes the open aggregates as events, in batches of one
// transaction each. A batch that fails goes back to the table for the next
// flush, unless final (the writer is stopping): it is then counted dropped.
func (q *auditQueue) flushAggregates(final bool) {
	q.mu.Lock()
	keyed, overflow := q.aggs.take()
	q.mu.Unlock()
	aggs, evs := keyed, make([]store.AuditEvent, 0, len(keyed)+1)
	for _, a := range keyed {
		evs = append(evs, a.event())
	}
	if overflow != nil {
		aggs = append(aggs, overflow)
		evs = append(evs, overflow.unattributedEvent())
		q.s.log.Warn("refusals past the audit limits recorded without their callers: too many callers and upstreams at once",
			"refusals", overflow.count, "aggregates", auditAggregatesMax)
	}
	for start := 0; start < len(evs); start += auditBatch {
		end := min(start+auditBatch, len(evs))
		err := q.record(evs[start:end])
		if err == nil {
			continue
		}
		q.s.log.Warn("recording aggregate audit events of rule denials", "events", end-start, "final", final, "err", err)
		if final {
			q.s.met.auditDropped.Add(float64(end - start))
			continue
		}
		q.mu.Lock()
		for _, a := range aggs[start:end] {
			if a == overflow {
				q.aggs.overflow = mergeOverflow(q.aggs.overflow, a)
			} else if !q.aggs.merge(a) {
				q.met.unattributed.Add(float64(a.count))
			}
		}
		q.mu.Unlock()
	}
}

func mergeOverflow(o, a *aggregate) *aggregate {
	if o == nil {
		return a
	}
	o.absorb(a)
	return o
}

// record writes evs in one transaction, with each group's full path. It is
// the one store call of the audit writer (a batched index writer can take
// it over as is).
func (q *auditQueue) record(evs []store.AuditEvent) error {
	paths := map[int64]string{}
	for i := range evs {
		ev := &evs[i]
		if ev.EntityType != store.AuditEntityGroup {
			continue
		}
		p, ok := paths[ev.EntityID]
		if !ok {
			if g, err := q.s.st.Group(ev.EntityID); err == nil {
				p = g.FullPath
			}
			paths[ev.EntityID] = p
		}
		ev.EntityPath = p
	}
	_, err := q.s.st.RecordAudit(evs...)
	return err
}

// auditMetrics count what the bounds on audit events did.
type auditMetrics struct {
	aggregated      map[string]prometheus.Counter // by reason, every reason resolved
	unattributed    prometheus.Counter
	deleted         prometheus.Counter
	retentionErrors prometheus.Counter
}

func newAuditMetrics(reg prometheus.Registerer) (*auditMetrics, error) {
	const ns, sub = "registryd", "audit"
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "denials_aggregated_total",
		Help: "Rule refusals counted in an aggregate audit event instead of an event of their own: the caller's or the registry's budget was spent, the writer's queue was full, or the write failed.",
	}, []string{"reason"})
	m := &auditMetrics{aggregated: map[string]prometheus.Counter{},
		unattributed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "denials_unattributed_total",
			Help: "Rule refusals counted in the instance's aggregate audit event because too many callers and upstreams were past the limits at once.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "events_deleted_total",
			Help: "Audit events deleted because they were older than audit.retention.",
		}),
		retentionErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "retention_errors_total",
			Help: "Runs of the audit retention job that failed (the index could not be read or written).",
		}),
	}
	for _, r := range aggReasons {
		m.aggregated[r] = vec.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{vec, m.unattributed, m.deleted, m.retentionErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// The retention job's series of registryd_cluster_job_skipped_total.
	_, err := clusterjob.NewSkipped(reg, jobAuditRetention)
	return m, err
}
