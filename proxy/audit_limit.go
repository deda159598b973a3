package proxy

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"registryd/auth"
	"registryd/internal/clientkey"
	"registryd/store"
)

// The bounds on the audit events of rule refusals (docs/operations.md,
// "Audit events: limits, retention and size").
//
// A refusal becomes an event of its own only while its caller and its
// registry have budget left: a token bucket per caller
// (audit.caller_denials_per_minute, all registries together) and one per
// registry (audit.registry_denials_per_minute, all callers together), each
// holding one minute's worth. Any other refusal (past a budget, with the
// writer's queue full, or whose write failed) is counted in the aggregate
// of its (registry, upstream, caller), which the writer records as one
// event every audit.aggregate_interval: N refusals between T1 and T2, the
// first and the last named. So one caller causes at most its budget plus
// one event per upstream and interval, its flood spends its own budget and
// not another caller's (a registry's budget is ten callers' by default,
// and the queue only takes events within budget), and no refusal goes
// uncounted.

// Why a refusal went into an aggregate: the label of
// registryd_audit_denials_aggregated_total.
const (
	aggCallerLimit   = "caller_limit"
	aggRegistryLimit = "registry_limit"
	aggQueueFull     = "queue_full"
	aggWriteFailed   = "write_failed"
)

var aggReasons = []string{aggCallerLimit, aggRegistryLimit, aggQueueFull, aggWriteFailed}

const (
	// auditBuckets bounds the callers and the registries whose budgets
	// are remembered. A budget forgotten starts full again: a caller
	// cycling through more identities than this gains budget, which the
	// registry's still bounds.
	auditBuckets = 1 << 14
	// auditAggregatesMax bounds the aggregates open at once. Past it,
	// refusals are counted in one event of the instance
	// (auditInstanceID), not attributed to a caller or a registry.
	auditAggregatesMax = 4096
	// auditInstanceID is the entity id of GitLab's instance scope
	// (Gitlab::Audit::InstanceScope#id).
	auditInstanceID = 1
)

// auditCaller is who a refusal is charged to: a user (all their tokens
// together), a deploy token, or an anonymous client (clientkey.Of: an IPv4
// address, an IPv6 /64, which one client controls), as the connection
// limits count clients.
type auditCaller struct {
	kind   auth.Kind
	id     int64
	client netip.Prefix // anonymous callers only
}

func callerOf(x *request) auditCaller {
	switch x.who.Kind {
	case auth.PersonalToken:
		return auditCaller{kind: auth.PersonalToken, id: x.who.User.ID}
	case auth.DeployToken:
		return auditCaller{kind: auth.DeployToken, id: x.who.Deploy.ID}
	}
	return auditCaller{kind: auth.Anonymous, client: clientkey.Of(clientkey.Addr(x.remote))}
}

// tokenBucket is a budget of perMinute events, refilled continuously and
// holding at most perMinute.
type tokenBucket struct {
	tokens float64
	at     time.Time
}

func (b *tokenBucket) refill(now time.Time, perMinute float64) {
	// A clock stepped back refills nothing; the next step forward counts
	// from the new reading.
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(perMinute, b.tokens+d.Minutes()*perMinute)
	}
	b.at = now
}

func bucketOf[K comparable](m *simplelru.LRU[K, *tokenBucket], k K, now time.Time, perMinute float64) *tokenBucket {
	b, ok := m.Get(k)
	if !ok {
		b = &tokenBucket{tokens: perMinute, at: now}
		m.Add(k, b)
		return b
	}
	b.refill(now, perMinute)
	return b
}

// auditLimits are the budgets of callers and registries. Not safe for
// concurrent use (auditQueue.mu guards it).
type auditLimits struct {
	caller, registry float64 // per minute
	callers          *simplelru.LRU[auditCaller, *tokenBucket]
	registries       *simplelru.LRU[int64, *tokenBucket]
}

func newAuditLimits(callerPerMinute, registryPerMinute int) (auditLimits, error) {
	l := auditLimits{caller: float64(callerPerMinute), registry: float64(registryPerMinute)}
	var err error
	if l.callers, err = simplelru.NewLRU[auditCaller, *tokenBucket](auditBuckets, nil); err != nil {
		return l, err
	}
	l.registries, err = simplelru.NewLRU[int64, *tokenBucket](auditBuckets, nil)
	return l, err
}

// admit spends one event of c's budget and of registry's, or names the
// budget that is spent (and takes nothing from either).
func (l *auditLimits) admit(c auditCaller, registry int64, now time.Time) string {
	cb := bucketOf(l.callers, c, now, l.caller)
	if cb.tokens < 1 {
		return aggCallerLimit
	}
	rb := bucketOf(l.registries, registry, now, l.registry)
	if rb.tokens < 1 {
		return aggRegistryLimit
	}
	cb.tokens--
	rb.tokens--
	return ""
}

// aggregateKey is what one aggregate event counts: the refusals of one
// caller by one upstream of one registry.
type aggregateKey struct {
	registry, up int64
	caller       auditCaller
}

// aggregateEnd is the first or the last refusal of an aggregate.
type aggregateEnd struct {
	at      time.Time
	rel     string // the file, relative to the upstream, redacted (deniedFile.rel)
	details string // its upstream URL (a single event's target_details)
}

// aggregate counts refusals of one key. ev is the last refusal's own
// event, whose author, scope, target and address the aggregate event takes.
type aggregate struct {
	key         aggregateKey
	count       int64
	first, last aggregateEnd
	ev          store.AuditEvent
	upURL       string
}

func newAggregate(r deniedFile) *aggregate {
	end := aggregateEnd{at: r.ev.CreatedAt, rel: r.rel, details: r.ev.TargetDetails}
	return &aggregate{key: r.key.aggregateKey(), count: 1, first: end, last: end, ev: r.ev, upURL: r.upURL}
}

// absorb adds b's refusals to a.
func (a *aggregate) absorb(b *aggregate) {
	a.count += b.count
	if b.first.at.Before(a.first.at) {
		a.first = b.first
	}
	if !b.last.at.Before(a.last.at) {
		a.last, a.ev, a.upURL = b.last, b.ev, b.upURL
	}
}

const auditTime = "2006-01-02T15:04:05.000Z"

// event is the aggregate's audit event: the last refusal's, with the count,
// the first refusal's time and both files, and the upstream as the target.
func (a *aggregate) event() store.AuditEvent {
	ev := a.ev
	who := ev.AuthorName
	if a.key.caller.kind == auth.Anonymous {
		who = "an unauthenticated user from " + ev.IPAddress
	}
	ev.TargetDetails = a.upURL
	ev.Message = fmt.Sprintf("Blocked package requests - %d refusals of %s by %s between %s and %s, "+
		"recorded as one event past the audit limits (first: %s, last: %s) (registry %d)",
		a.count, a.upURL, who, a.first.at.UTC().Format(auditTime), a.last.at.UTC().Format(auditTime),
		a.first.rel, a.last.rel, a.key.registry)
	ev.CreatedAt = a.last.at
	ev.Count, ev.FirstAt, ev.FirstDetails, ev.LastDetails = a.count, a.first.at, a.first.details, a.last.details
	return ev
}

// unattributedEvent is the instance's event of the refusals counted while
// the table of aggregates was full: registryd (author 0) records it, with
// the count, the times and the first and last files' URLs.
func (a *aggregate) unattributedEvent() store.AuditEvent {
	return store.AuditEvent{
		EventName: store.AuditUpstreamArtifactDenied, AuthorName: "registryd",
		EntityType: store.AuditEntityInstance, EntityID: auditInstanceID,
		Message: fmt.Sprintf("Blocked package requests - %d refusals between %s and %s not attributed to their callers: "+
			"more than %d callers and upstreams were past the audit limits at once (first: %s, last: %s)",
			a.count, a.first.at.UTC().Format(auditTime), a.last.at.UTC().Format(auditTime), auditAggregatesMax,
			a.first.details, a.last.details),
		CreatedAt: a.last.at,
		Count:     a.count, FirstAt: a.first.at, FirstDetails: a.first.details, LastDetails: a.last.details,
	}
}

// auditAggregates is the table of open aggregates, at most max, and the
// refusals counted past it. Not safe for concurrent use (auditQueue.mu).
type auditAggregates struct {
	m        map[aggregateKey]*aggregate
	max      int
	overflow *aggregate
}

// merge counts b in its key's aggregate, in a new one while the table has
// room, else in the overflow; the table keeps b.
func (t *auditAggregates) merge(b *aggregate) (attributed bool) {
	if a, ok := t.m[b.key]; ok {
		a.absorb(b)
		return true
	}
	if len(t.m) < t.max {
		if t.m == nil {
			t.m = map[aggregateKey]*aggregate{}
		}
		t.m[b.key] = b
		return true
	}
	if t.overflow == nil {
		t.overflow = b
	} else {
		t.overflow.absorb(b)
	}
	return false
}

// take empties the table and returns what it held.
func (t *auditAggregates) take() (keyed []*aggregate, overflow *aggregate) {
	for _, a := range t.m {
		keyed = append(keyed, a)
	}
	overflow = t.overflow
	t.m, t.overflow = nil, nil
	return keyed, overflow
}
