package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/internal/redact"
	"registryd/store"
)

// Tests of the bounds on the audit events of rule refusals
// (audit_limit.go) and of their retention (audit_retention.go).

// member creates a user with a read_virtual_registry token who is a member
// of the env's group at level.
func (e *env) member(name string, level int) (store.User, string) {
	e.t.Helper()
	id, tok := e.user(name, store.ScopeReadVirtualRegistry)
	if _, err := e.st.AddGroupMember(e.group.ID, id, level, nil); err != nil {
		e.t.Fatal(err)
	}
	u, err := e.st.User(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return u, tok
}

// askAs downloads path from registry reg with the credential header hdr.
func (e *env) askAs(reg int64, hdr, token, path string) resp {
	e.t.Helper()
	return e.do(http.MethodGet, "/"+strconv.FormatInt(reg, 10)+"/"+path, nil, hdr, token)
}

// deniedJar is the i-th of many distinct files of group com.internal.
func deniedJar(prefix string, i int) string {
	return fmt.Sprintf("com/internal/%s%d/1.0/%s%d-1.0.jar", prefix, i, prefix, i)
}

// refusingUpstream adds an upstream to registry reg whose rules refuse
// group com.internal and everything under it.
func (e *env) refusingUpstream(reg int64, url string) int64 {
	e.t.Helper()
	u, err := e.st.CreateUpstream(reg, store.NewUpstream{URL: url, Name: url})
	if err != nil {
		e.t.Fatal(err)
	}
	addRule(e.t.(*testing.T), e, u.ID, "deny", "group_id", "wildcard", "com.internal*")
	return u.ID
}

// auditEvents returns every audit event, oldest first.
func (e *env) auditEvents() []store.AuditEvent {
	e.t.Helper()
	evs, total, err := e.st.AuditEventsPage(store.AuditQuery{Limit: 100000})
	if err != nil {
		e.t.Fatal(err)
	}
	if total != len(evs) {
		e.t.Fatalf("%d events listed of %d", len(evs), total)
	}
	for i, j := 0, len(evs)-1; i < j; i, j = i+1, j-1 {
		evs[i], evs[j] = evs[j], evs[i]
	}
	return evs
}

// auditTally is what the events say of one author: events of their own,
// aggregate events and the refusals those count.
type auditTally struct{ singles, aggregates, aggregated int }

func tallyByAuthor(evs []store.AuditEvent) map[string]auditTally {
	out := map[string]auditTally{}
	for _, ev := range evs {
		t := out[ev.AuthorName]
		if ev.Count > 0 {
			t.aggregates++
			t.aggregated += int(ev.Count)
		} else {
			t.singles++
		}
		out[ev.AuthorName] = t
	}
	return out
}

// A guest asking for thousands of distinct refused files records its
// budget of events and one aggregate counting every other refusal; another
// user's and a deploy token's refusals in the middle of the flood are
// events of their own; a minute later the guest's budget is whole again.
func TestAuditDenialFlood(t *testing.T) {
	e := newEnv(t)
	e.srv.audit.start()
	up := newFakeUpstream(t)
	uid := e.refusingUpstream(e.registry, up.URL)
	guest, guestTok := e.member("guest", store.Guest)
	_, devTok := e.member("dev", store.Developer)
	const deployTok = "rddt-acme-deploy-token-0123456789"
	if _, err := e.st.CreateDeployToken(store.NewDeployToken{GroupID: e.group.ID, Name: "ci", Username: "ci-bot",
		Scopes: []string{store.ScopeReadVirtualRegistry}, Plain: deployTok}); err != nil {
		t.Fatal(err)
	}
	budget := e.srv.opts.Audit.CallerDenialsPerMinute
	const flood, workers = 2000, 4

	half := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += workers {
				if r := e.askAs(e.registry, "Private-Token", guestTok, deniedJar("g", i)); r.status != 403 {
					t.Errorf("guest's refused file: status %d", r.status)
				}
				if sent.Add(1) == flood/2 {
					close(half)
				}
			}
		}()
	}
	<-half // the guest's budget is long spent
	e.askAs(e.registry, "Private-Token", devTok, deniedJar("dev", 0)).expect(t, 403)
	e.askAs(e.registry, "Deploy-Token", deployTok, deniedJar("ci", 0)).expect(t, 403)
	wg.Wait()
	e.srv.audit.stopDrain()

	evs := e.auditEvents()
	tally := tallyByAuthor(evs)
	if g := tally[guest.Name]; g != (auditTally{singles: budget, aggregates: 1, aggregated: flood - budget}) {
		t.Fatalf("guest: %+v, want %d events of their own and one aggregate of %d", g, budget, flood-budget)
	}
	for _, other := range []string{"dev", "ci"} {
		if got := tally[other]; got != (auditTally{singles: 1}) {
			t.Fatalf("%s, refused during the flood: %+v, want one event of their own", other, got)
		}
	}
	if len(evs) != budget+3 {
		t.Fatalf("%d events, want %d", len(evs), budget+3)
	}
	if got := e.metric("registryd_audit_denials_aggregated_total", "reason", aggCallerLimit); got != flood-float64(budget) {
		t.Fatalf("aggregated for the caller limit: %v, want %d", got, flood-budget)
	}
	if got := e.metric("registryd_upstream_rule_denials_total"); got != flood+2 {
		t.Fatalf("denials counted %v, want %d", got, flood+2)
	}
	if got := e.metric("registryd_audit_events_dropped_total"); got != 0 {
		t.Fatalf("dropped %v", got)
	}

	var agg store.AuditEvent
	for _, ev := range evs {
		if ev.Count > 0 {
			agg = ev
		}
	}
	upURL := strings.TrimSuffix(up.URL, "/")
	if agg.AuthorID != guest.ID || agg.AuthorClass != store.AuditAuthorClassUser || agg.EntityID != e.group.ID ||
		agg.EntityType != store.AuditEntityGroup || agg.EntityPath != "acme" || agg.TargetID != uid ||
		agg.TargetType != store.AuditTargetMavenUpstream || agg.TargetDetails != upURL ||
		agg.EventName != store.AuditUpstreamArtifactDenied || agg.IPAddress != "127.0.0.1" {
		t.Fatalf("aggregate %+v", agg)
	}
	if !strings.HasPrefix(agg.FirstDetails, upURL+"/com/internal/g") || !strings.HasPrefix(agg.LastDetails, upURL+"/com/internal/g") ||
		agg.FirstAt.After(agg.CreatedAt) {
		t.Fatalf("aggregate's first and last: %v %q, %v %q", agg.FirstAt, agg.FirstDetails, agg.CreatedAt, agg.LastDetails)
	}
	wantMsg := fmt.Sprintf("Blocked package requests - %d refusals of %s by guest between ", flood-budget, upURL)
	if !strings.HasPrefix(agg.Message, wantMsg) || !strings.Contains(agg.Message, fmt.Sprintf("(registry %d)", e.registry)) {
		t.Fatalf("message %q, want it to begin %q", agg.Message, wantMsg)
	}

	// A minute later: a whole budget again, and a new aggregate.
	e.clock.Advance(time.Minute)
	e.srv.audit.start()
	for i := flood; i < flood+100; i++ {
		e.askAs(e.registry, "Private-Token", guestTok, deniedJar("g", i)).expect(t, 403)
	}
	e.srv.audit.stopDrain()
	later := tallyByAuthor(e.auditEvents()[len(evs):])
	if g := later[guest.Name]; g != (auditTally{singles: budget, aggregates: 1, aggregated: 100 - budget}) {
		t.Fatalf("a minute later: %+v, want %d events of their own and one aggregate of %d", g, budget, 100-budget)
	}
}

// A registry's budget is shared by its callers, a caller's by its
// registries: callers past a spent registry budget are aggregated (each in
// their own aggregate), and a caller past their own budget is aggregated in
// another registry too, whose budget stays for its other callers.
func TestAuditRegistryBudget(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Audit.CallerDenialsPerMinute, o.Audit.RegistryDenialsPerMinute = 5, 12 })
	up := newFakeUpstream(t)
	e.refusingUpstream(e.registry, up.URL)
	second, err := e.st.CreateRegistry(e.group.ID, "second", "")
	if err != nil {
		t.Fatal(err)
	}
	e.refusingUpstream(second.ID, newFakeUpstream(t).URL)
	tokens := map[string]string{}
	for _, name := range []string{"u1", "u2", "u3", "u4", "u5"} {
		_, tokens[name] = e.member(name, store.Guest)
	}
	ask := func(reg int64, who string, n int) {
		t.Helper()
		for i := range n {
			e.askAs(reg, "Private-Token", tokens[who], deniedJar(who+"r"+strconv.FormatInt(reg, 10)+"-", i)).expect(t, 403)
		}
	}
	for _, who := range []string{"u1", "u2", "u3", "u4"} {
		ask(e.registry, who, 10)
	}
	ask(second.ID, "u1", 3)
	ask(second.ID, "u5", 1)
	e.srv.audit.stopDrain()

	type key struct {
		reg, who string
		agg      bool
	}
	got := map[key]int64{}
	for _, ev := range e.auditEvents() {
		reg := ev.Message[strings.LastIndex(ev.Message, "(registry "):]
		got[key{reg, ev.AuthorName, ev.Count > 0}] += max(ev.Count, 1)
	}
	r1, r2 := fmt.Sprintf("(registry %d)", e.registry), fmt.Sprintf("(registry %d)", second.ID)
	want := map[key]int64{
		{r1, "u1", false}: 5, {r1, "u1", true}: 5, // the caller's budget
		{r1, "u2", false}: 5, {r1, "u2", true}: 5,
		{r1, "u3", false}: 2, {r1, "u3", true}: 8, // the registry's budget spent
		{r1, "u4", true}:  10,
		{r2, "u1", true}:  3, // u1's own budget is spent in every registry
		{r2, "u5", false}: 1, // the second registry's budget is its own
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events by registry, author and kind (aggregates: their count):\n got %v\nwant %v", got, want)
	}
	for reason, n := range map[string]float64{aggCallerLimit: 13, aggRegistryLimit: 18, aggQueueFull: 0, aggWriteFailed: 0} {
		if got := e.metric("registryd_audit_denials_aggregated_total", "reason", reason); got != n {
			t.Errorf("aggregated for %s: %v, want %v", reason, got, n)
		}
	}
}

// Callers are users (whatever their token), deploy tokens, or client
// addresses, IPv6 per /64. (Anonymous downloads are refused 401 before any
// rule is read today; the address is the caller should they be let in.)
func TestAuditCallerOf(t *testing.T) {
	caller := func(who auth.Principal, addr string) auditCaller {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr)), nil)
		// As download does: resolution reads the caller's address, not the request.
		return callerOf(&request{who: who, remote: ctx.RemoteAddr()})
	}
	alice := auth.Principal{Kind: auth.PersonalToken, User: store.User{ID: 7}}
	ci := auth.Principal{Kind: auth.DeployToken, Deploy: store.DeployToken{ID: 7}}
	anon := auth.Principal{}
	for _, tt := range []struct {
		name      string
		a, b      auditCaller
		sameQuota bool
	}{
		{"a user from two addresses", caller(alice, "192.0.2.1:1"), caller(alice, "198.51.100.1:1"), true},
		{"a user and a deploy token of the same id", caller(alice, "192.0.2.1:1"), caller(ci, "192.0.2.1:1"), false},
		{"anonymous, one IPv6 /64", caller(anon, "[2001:db8:1:2::1]:1"), caller(anon, "[2001:db8:1:2:ffff::9]:1"), true},
		{"anonymous, two /64s", caller(anon, "[2001:db8:1:2::1]:1"), caller(anon, "[2001:db8:1:3::1]:1"), false},
		{"anonymous, IPv4 as mapped IPv6", caller(anon, "192.0.2.1:1"), caller(anon, "[::ffff:192.0.2.1]:1"), true},
		{"anonymous, two IPv4 addresses", caller(anon, "192.0.2.1:1"), caller(anon, "192.0.2.2:1"), false},
	} {
		if (tt.a == tt.b) != tt.sameQuota {
			t.Errorf("%s: %+v and %+v, want the same caller: %v", tt.name, tt.a, tt.b, tt.sameQuota)
		}
	}
}

// A token the client pasted into a refused path (as a segment, which the
// group id rule quotes too, or as a parameter, encoded or not) is in no
// stored event, neither one of its own nor an aggregate: each shows
// [redacted] where the token was, and the rest of the path as asked.
func TestAuditRedactsTokensInPaths(t *testing.T) {
	const secret = "Tok3nValue0123456789abcdef"
	e := newEnv(t, func(o *envOptions) { o.Audit.CallerDenialsPerMinute, o.Audit.RegistryDenialsPerMinute = 2, 100 })
	up := newFakeUpstream(t)
	e.refusingUpstream(e.registry, up.URL)
	for _, p := range []string{
		"com/internal/glpat-" + secret + "/a/1.0/a-1.0.jar",      // an event of its own
		"com/internal/a/1.0/a-1.0.jar&private_token=" + secret,   // an event of its own
		"com/internal/b/1.0/b-1.0.jar%26job_token%3D" + secret,   // aggregated: the caller's budget is spent
		"com/internal/rdpat-" + secret + "/c/1.0/c-1.0.jar.sha1", // aggregated, a checksum of its file
	} {
		e.askAs(e.registry, "Private-Token", rootToken, p).expect(t, 403)
	}
	e.srv.audit.stopDrain()
	evs := e.auditEvents()
	if tally := tallyByAuthor(evs)["Administrator"]; tally != (auditTally{2, 1, 2}) {
		t.Fatalf("events %+v, want 2 of their own and an aggregate of 2", tally)
	}
	upURL := strings.TrimSuffix(up.URL, "/")
	for _, ev := range evs {
		if dump := fmt.Sprintf("%+v", ev); strings.Contains(dump, secret) || strings.Contains(dump, secret[:8]) {
			t.Fatalf("a stored event carries the token: %s", dump)
		}
		if ev.Count == 0 {
			if !strings.HasPrefix(ev.TargetDetails, upURL+"/com/internal/") || !strings.Contains(ev.TargetDetails, redact.Mark) {
				t.Errorf("target_details %q", ev.TargetDetails)
			}
			continue
		}
		if ev.FirstDetails != upURL+"/com/internal/b/1.0/b-1.0.jar&job_token="+redact.Mark ||
			ev.LastDetails != upURL+"/com/internal/"+redact.Mark+"/c/1.0/c-1.0.jar" ||
			strings.Count(ev.Message, redact.Mark) != 2 {
			t.Errorf("aggregate: %q, %q, %q", ev.FirstDetails, ev.LastDetails, ev.Message)
		}
	}
	// The rule quotes the group id, whose segment held the token.
	if want := `matches group_id "com.internal.` + redact.Mark + `"`; !strings.Contains(evs[0].Message, want) {
		t.Errorf("message %q, want it to hold %q", evs[0].Message, want)
	}
}

// Past the table of aggregates, refusals are still counted: in one event
// of the instance, which names no caller.
func TestAuditAggregatesFull(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Audit.CallerDenialsPerMinute, o.Audit.RegistryDenialsPerMinute = 1, 2 })
	e.srv.audit.mu.Lock()
	e.srv.audit.aggs.max = 2
	e.srv.audit.mu.Unlock()
	up := newFakeUpstream(t)
	e.refusingUpstream(e.registry, up.URL)
	for _, who := range []string{"a", "b", "c"} {
		_, tok := e.member(who, store.Guest)
		for i := range 3 {
			e.askAs(e.registry, "Private-Token", tok, deniedJar(who, i)).expect(t, 403)
		}
	}
	e.srv.audit.stopDrain()
	tally := tallyByAuthor(e.auditEvents())
	want := map[string]auditTally{"a": {1, 1, 2}, "b": {1, 1, 2}, "registryd": {0, 1, 3}}
	if fmt.Sprint(tally) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", tally, want)
	}
	inst, n, err := e.st.AuditEventsPage(store.AuditQuery{EntityType: store.AuditEntityInstance, EntityID: auditInstanceID, Limit: 10})
	if err != nil || n != 1 || inst[0].Count != 3 || !strings.Contains(inst[0].Message, "not attributed to their callers") ||
		!strings.HasSuffix(inst[0].LastDetails, deniedJar("c", 2)) {
		t.Fatalf("the instance's event: %+v (%d, %v)", inst, n, err)
	}
	if got := e.metric("registryd_audit_denials_unattributed_total"); got != 3 {
		t.Fatalf("unattributed %v, want 3", got)
	}
}

// A full queue (the writer behind) puts refusals in aggregates, never
// drops them.
func TestAuditQueueFull(t *testing.T) {
	const n = auditQueueLen + 76
	e := newEnv(t, func(o *envOptions) { o.Audit.CallerDenialsPerMinute, o.Audit.RegistryDenialsPerMinute = 5000, 5001 })
	up := newFakeUpstream(t)
	e.refusingUpstream(e.registry, up.URL)
	// The writer is not started: the queue fills.
	for i := range n {
		e.askAs(e.registry, "Private-Token", rootToken, deniedJar("q", i)).expect(t, 403)
	}
	if got := e.metric("registryd_audit_denials_aggregated_total", "reason", aggQueueFull); got != n-auditQueueLen {
		t.Fatalf("aggregated for a full queue: %v, want %d", got, n-auditQueueLen)
	}
	e.srv.audit.stopDrain()
	if got := tallyByAuthor(e.auditEvents())["Administrator"]; got != (auditTally{auditQueueLen, 1, n - auditQueueLen}) {
		t.Fatalf("events %+v", got)
	}
	if got := e.metric("registryd_audit_events_dropped_total"); got != 0 {
		t.Fatalf("dropped %v", got)
	}
}

// Retention deletes the events older than audit.retention and keeps the
// younger ones, by the injected clock; 0 keeps everything.
func TestAuditRetention(t *testing.T) {
	const retention = 30 * 24 * time.Hour
	e := newEnv(t, func(o *envOptions) { o.Audit.Retention = retention })
	now := e.clock.Now()
	ev := func(age time.Duration, file string) store.AuditEvent {
		return store.AuditEvent{EventName: store.AuditUpstreamArtifactDenied, EntityType: store.AuditEntityGroup,
			EntityID: e.group.ID, TargetDetails: file, CreatedAt: now.Add(-age)}
	}
	// Two batches and a bit of old events, and younger ones.
	var in []store.AuditEvent
	for i := range 2*auditExpireBatch + 5 {
		in = append(in, ev(40*24*time.Hour, "old"+strconv.Itoa(i)))
	}
	in = append(in, ev(retention+time.Millisecond, "just-expired"), ev(retention, "at-the-limit"),
		ev(29*24*time.Hour, "young"), ev(0, "now"))
	if _, err := e.st.RecordAudit(in...); err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		var out []string
		for _, ev := range e.auditEvents() {
			out = append(out, ev.TargetDetails)
		}
		return out
	}
	n, err := e.srv.ExpireAuditOnce()
	if err != nil || n != 2*auditExpireBatch+6 {
		t.Fatalf("expired %d (%v), want %d", n, err, 2*auditExpireBatch+6)
	}
	if got := strings.Join(left(), " "); got != "at-the-limit young now" {
		t.Fatalf("left %q", got)
	}
	if got := e.metric("registryd_audit_events_deleted_total"); got != float64(n) {
		t.Fatalf("deleted metric %v, want %d", got, n)
	}
	e.clock.Advance(2 * 24 * time.Hour)
	if n, err := e.srv.ExpireAuditOnce(); err != nil || n != 2 {
		t.Fatalf("two days later: %d (%v), want 2", n, err)
	}
	if got := strings.Join(left(), " "); got != "now" {
		t.Fatalf("left %q", got)
	}

	forever := newEnv(t, func(o *envOptions) { o.Audit.Retention = -1 }) // audit.retention 0: forever
	if _, err := forever.st.RecordAudit(store.AuditEvent{EventName: store.AuditUpstreamArtifactDenied,
		EntityType: store.AuditEntityGroup, EntityID: forever.group.ID, CreatedAt: now.Add(-10 * 365 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n, err := forever.srv.ExpireAuditOnce(); n != 0 || err != nil || len(forever.auditEvents()) != 1 {
		t.Fatalf("retention 0 deleted %d (%v)", n, err)
	}
}
