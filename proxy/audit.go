package proxy

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"registryd/auth"
	"registryd/maven"
	"registryd/store"
)

// Rule denials are recorded as audit events (GET /audit_events), GitLab's
// virtual_registries_packages_maven_upstream_artifact_denied, off the
// request path: a request queues the event and one goroutine writes queued
// events in batches, one transaction each. A build asks for a refused file
// and its checksums again and again; the same (upstream, file, caller) is
// recorded once per denialAuditWindow (the metric counts every refusal). A
// full queue drops the event (registryd_audit_events_dropped_total) rather
// than slow the request.

const (
	denialAuditWindow = 10 * time.Minute
	auditQueueLen     = 1024
	auditBatch        = 64
	auditSeenSize     = 1 << 14
)

type auditQueue struct {
	s  *Server
	ch chan queuedAudit

	mu   sync.Mutex
	seen *simplelru.LRU[denialKey, time.Time]

	bgMu sync.Mutex
	stop chan struct{}
	done chan struct{}
}

type denialKey struct {
	registry, up, author int64
	authorKind           auth.Kind
	rel                  string
}

// queuedAudit is an event on its way to the store, with its dedupe key,
// which is forgotten again if the event cannot be written.
type queuedAudit struct {
	ev  store.AuditEvent
	key denialKey
}

func newAuditQueue(s *Server) (*auditQueue, error) {
	seen, err := simplelru.NewLRU[denialKey, time.Time](auditSeenSize, nil)
	if err != nil {
		return nil, err
	}
	return &auditQueue{s: s, ch: make(chan queuedAudit, auditQueueLen), seen: seen}, nil
}

// denied queues the audit event of upstream u's rules refusing x's file.
func (q *auditQueue) denied(x *exchange, u *upstreamView, v maven.Verdict) {
	now := q.s.now()
	rel := x.path.EntryRel()
	k := denialKey{registry: x.reg.id, up: u.id, authorKind: x.who.Kind, rel: rel}
	switch x.who.Kind {
	case auth.PersonalToken:
		k.author = x.who.User.ID
	case auth.DeployToken:
		k.author = x.who.Deploy.ID
	}
	q.mu.Lock()
	t, ok := q.seen.Get(k)
	q.mu.Unlock()
	if ok && now.Sub(t) < denialAuditWindow {
		return
	}
	k.rel = strings.Clone(rel) // the key outlives the request

	ev := store.AuditEvent{
		EventName:     store.AuditUpstreamArtifactDenied,
		EntityID:      x.reg.group,
		EntityType:    store.AuditEntityGroup,
		TargetID:      u.id,
		TargetType:    store.AuditTargetMavenUpstream,
		TargetDetails: strings.TrimSuffix(u.ep.URL, "/") + "/" + k.rel,
		Message:       "Blocked package request - " + v.Reason() + " (registry " + strconv.FormatInt(x.reg.id, 10) + ")",
		IPAddress:     x.ctx.RemoteIP().String(),
		CreatedAt:     now,
	}
	// GitLab's authors: a user by id; a deploy token as author -2 under
	// its own name.
	switch x.who.Kind {
	case auth.PersonalToken:
		ev.AuthorID, ev.AuthorName, ev.AuthorClass = x.who.User.ID, x.who.User.Name, store.AuditAuthorClassUser
	case auth.DeployToken:
		ev.AuthorID, ev.AuthorName, ev.AuthorClass = store.AuditAuthorDeployToken, x.who.Deploy.Name, store.AuditAuthorClassDeployToken
	}
	// Seen only once queued: a dropped event does not hide the next one.
	// (Two requests racing here may both queue one: harmless.) An event
	// queued after the writer stopped (a request that outlived Shutdown)
	// is not written; it is counted as dropped by stopDrain.
	select {
	case q.ch <- queuedAudit{ev: ev, key: k}:
		q.mu.Lock()
		q.seen.Add(k, now)
		q.mu.Unlock()
	default:
		q.s.met.auditDropped.Inc()
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

// stopDrain stops the writer after it has written what is queued.
func (q *auditQueue) stopDrain() {
	q.bgMu.Lock()
	stop, done := q.stop, q.done
	q.stop = nil
	q.bgMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	// What is still queued (the writer never ran, or a request queued
	// after the drain) is not written: count it.
	for {
		select {
		case <-q.ch:
			q.s.met.auditDropped.Inc()
		default:
			return
		}
	}
}

func (q *auditQueue) run(stop, done chan struct{}) {
	defer close(done)
	batch := make([]queuedAudit, 0, auditBatch)
	for {
		select {
		case ev := <-q.ch:
			batch = append(batch[:0], ev)
		case <-stop:
			for {
				batch = q.drain(batch[:0])
				if len(batch) == 0 {
					return
				}
				q.write(batch)
			}
		}
		q.write(q.drain(batch))
	}
}

// drain adds what is queued to batch, up to auditBatch events.
func (q *auditQueue) drain(batch []queuedAudit) []queuedAudit {
	for len(batch) < auditBatch {
		select {
		case ev := <-q.ch:
			batch = append(batch, ev)
		default:
			return batch
		}
	}
	return batch
}

// write records a batch in one transaction, with each group's full path.
func (q *auditQueue) write(batch []queuedAudit) {
	paths := map[int64]string{}
	evs := make([]store.AuditEvent, len(batch))
	for i := range batch {
		ev := &evs[i]
		*ev = batch[i].ev
		p, ok := paths[ev.EntityID]
		if !ok {
			if g, err := q.s.st.Group(ev.EntityID); err == nil {
				p = g.FullPath
			}
			paths[ev.EntityID] = p
		}
		ev.EntityPath = p
	}
	if _, err := q.s.st.RecordAudit(evs...); err != nil {
		q.s.met.auditDropped.Add(float64(len(batch)))
		q.s.log.Warn("recording audit events of rule denials", "events", len(batch), "err", err)
		q.mu.Lock()
		for _, b := range batch {
			q.seen.Remove(b.key)
		}
		q.mu.Unlock()
	}
}
