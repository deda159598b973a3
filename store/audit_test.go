package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// denial is an audit event as the proxy records a refused file.
func denial(group, upstream, author int64, file string) AuditEvent {
	return AuditEvent{EventName: AuditUpstreamArtifactDenied, AuthorID: author, AuthorName: "Alice",
		AuthorClass: AuditAuthorClassUser, EntityID: group, EntityType: AuditEntityGroup, EntityPath: "acme",
		TargetID: upstream, TargetType: AuditTargetMavenUpstream,
		TargetDetails: "https://repo.example/maven2/" + file, Message: "Blocked package request - View matching patterns",
		IPAddress: "192.0.2.7"}
}

func ids(evs []AuditEvent) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func TestRecordAuditBatch(t *testing.T) {
	s, clock := openTest(t)
	auth, cache := s.AuthGeneration(), s.CacheGeneration()
	at := time.Date(2026, 3, 1, 12, 0, 0, 123_456_789, time.UTC)
	in := []AuditEvent{denial(7, 3, 2, "a.jar"), denial(7, 3, 2, "b.jar"), denial(8, 4, 2, "c.jar")}
	in[2].CreatedAt = at
	got := ok(s.RecordAudit(in...))(t)
	if want := []int64{1, 2, 3}; !slices.Equal(ids(got), want) {
		t.Fatalf("ids %v, want %v", ids(got), want)
	}
	if in[0].ID != 0 {
		t.Fatal("RecordAudit changed its argument")
	}
	now := clock.Now().Truncate(time.Millisecond)
	if !got[0].CreatedAt.Equal(now) || !got[1].CreatedAt.Equal(now) {
		t.Fatalf("created_at %v, %v; want the store clock %v", got[0].CreatedAt, got[1].CreatedAt, now)
	}
	if want := at.Truncate(time.Millisecond); !got[2].CreatedAt.Equal(want) {
		t.Fatalf("given created_at stored as %v, want %v", got[2].CreatedAt, want)
	}
	for _, want := range got {
		e := ok(s.AuditEvent(want.ID))(t)
		if e != want {
			t.Fatalf("AuditEvent(%d) = %+v\nwant %+v", want.ID, e, want)
		}
	}
	if s.AuthGeneration() != auth || s.CacheGeneration() != cache {
		t.Fatal("an audit write bumped the auth or cache generation")
	}
	if _, err := s.AuditEvent(99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("AuditEvent(99): %v, want ErrNotFound", err)
	}
	if out, err := s.RecordAudit(); err != nil || out != nil {
		t.Fatalf("RecordAudit(): %v, %v", out, err)
	}
}

// An aggregate keeps its count, its first time and the details of its
// first and last occurrence; a single event carries none of them, and a
// reader that stops after the strings (a registryd from before aggregates)
// sees the aggregate as a single event.
func TestRecordAuditAggregate(t *testing.T) {
	s, _ := openTest(t)
	last := time.Date(2026, 3, 1, 12, 0, 59, 0, time.UTC)
	agg := denial(7, 3, 2, "")
	agg.TargetDetails, agg.CreatedAt = "https://repo.example/maven2", last
	agg.Count, agg.FirstAt = 4950, last.Add(-59*time.Second)
	agg.FirstDetails, agg.LastDetails = "https://repo.example/maven2/a/1/a-1.jar", "https://repo.example/maven2/z/1/z-1.jar"
	noFirst := agg
	noFirst.FirstAt = time.Time{}
	single := denial(7, 3, 2, "a.jar")
	single.FirstDetails = "ignored without a count"
	got := ok(s.RecordAudit(agg, noFirst, single))(t)
	for i, want := range got {
		if e := ok(s.AuditEvent(want.ID))(t); e != want {
			t.Fatalf("event %d stored as %+v\nreturned %+v", i, e, want)
		}
	}
	if got[0].Count != 4950 || !got[0].FirstAt.Equal(agg.FirstAt) || got[0].FirstDetails != agg.FirstDetails ||
		got[0].LastDetails != agg.LastDetails {
		t.Fatalf("aggregate %+v", got[0])
	}
	if !got[1].FirstAt.Equal(last) {
		t.Fatalf("aggregate without first_at: %v, want created_at %v", got[1].FirstAt, last)
	}
	if got[2].Count != 0 || got[2].FirstDetails != "" || !got[2].FirstAt.IsZero() {
		t.Fatalf("single event %+v", got[2])
	}

	// What an older binary reads: the fixed part and the strings.
	rec := encodeAuditEvent(&got[0])
	plain := got[0]
	plain.Count, plain.FirstAt, plain.FirstDetails, plain.LastDetails = 0, time.Time{}, "", ""
	old := encodeAuditEvent(&plain)
	if !slices.Equal(rec[:len(old)], old) {
		t.Fatal("an aggregate's record does not begin with its single event's record")
	}
	var e AuditEvent
	if err := decodeAuditEvent(got[0].ID, rec[:len(rec)-3], &e); err == nil {
		t.Fatal("a cut aggregate decoded")
	}

	var ve *ValidationError
	bad := agg
	bad.FirstAt = last.Add(time.Second)
	if _, err := s.RecordAudit(bad); !errors.As(err, &ve) || ve.Fields["first_at"] == nil {
		t.Fatalf("first_at after created_at: %v", err)
	}
	bad = agg
	bad.Count = -1
	if _, err := s.RecordAudit(bad); !errors.As(err, &ve) || ve.Fields["count"] == nil {
		t.Fatalf("negative count: %v", err)
	}
}

func TestRecordAuditTruncates(t *testing.T) {
	s, _ := openTest(t)
	e := denial(7, 3, 2, strings.Repeat("é", 6000))
	e.AuthorName = strings.Repeat("n", 300)
	e.Message = "bad \xff byte"
	e.EventName = strings.Repeat("x", 256)
	got := ok(s.RecordAudit(e))(t)[0]
	stored := ok(s.AuditEvent(got.ID))(t)
	if stored != got {
		t.Fatalf("stored %+v, returned %+v", stored, got)
	}
	for _, c := range []struct {
		name, val string
		max       int
	}{{"target_details", got.TargetDetails, maxAuditDetail}, {"author_name", got.AuthorName, maxAuditShort},
		{"event_name", got.EventName, maxAuditShort}} {
		if n := len([]rune(c.val)); n != c.max || !strings.HasSuffix(c.val, "...") {
			t.Errorf("%s: %d characters ending %q, want %d ending ...", c.name, n, c.val[len(c.val)-5:], c.max)
		}
	}
	if got.Message != "bad \uFFFD byte" {
		t.Errorf("message %q: invalid UTF-8 should be replaced", got.Message)
	}
	short := denial(7, 3, 2, "a.jar")
	if got := ok(s.RecordAudit(short))(t)[0]; got.TargetDetails != short.TargetDetails {
		t.Errorf("short value changed: %q", got.TargetDetails)
	}
}

func TestRecordAuditAuthorsWhoAreNotUsers(t *testing.T) {
	s, _ := openTest(t)
	anon, dt, named := denial(7, 3, AuditAuthorUnauthenticated, "a.jar"), denial(7, 3, AuditAuthorDeployToken, "b.jar"),
		denial(7, 3, AuditAuthorDeployToken, "c.jar")
	anon.AuthorName, anon.AuthorClass, dt.AuthorName, dt.AuthorClass = "", "", "", ""
	named.AuthorName, named.AuthorClass = "ci-token", AuditAuthorClassDeployToken
	got := ok(s.RecordAudit(anon, dt, named))(t)
	want := [][2]string{{"An unauthenticated user", AuditAuthorClassUnauthenticated},
		{"Deploy Token", AuditAuthorClassDeployToken}, {"ci-token", AuditAuthorClassDeployToken}}
	for i, w := range want {
		if got[i].AuthorName != w[0] || got[i].AuthorClass != w[1] {
			t.Errorf("event %d: author %q %q, want %q %q", i, got[i].AuthorName, got[i].AuthorClass, w[0], w[1])
		}
	}
}

func TestRecordAuditRejectsTheWholeBatch(t *testing.T) {
	s, _ := openTest(t)
	good := denial(7, 3, 2, "a.jar")
	for _, tt := range []struct {
		name  string
		bad   func(*AuditEvent)
		field string
	}{
		{"no event name", func(e *AuditEvent) { e.EventName = " " }, "audit_events[1].event_name"},
		{"unknown entity type", func(e *AuditEvent) { e.EntityType = "Namespace" }, "audit_events[1].entity_type"},
		{"no entity", func(e *AuditEvent) { e.EntityID = 0 }, "audit_events[1].entity_id"},
		{"negative target", func(e *AuditEvent) { e.TargetID = -1 }, "audit_events[1].target_id"},
		{"before 1970", func(e *AuditEvent) { e.CreatedAt = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) }, "audit_events[1].created_at"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := good
			tt.bad(&bad)
			_, err := s.RecordAudit(good, bad)
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Fields[tt.field] == nil {
				t.Fatalf("err %v, want a validation error on %s", err, tt.field)
			}
			if _, total := ok2(s.AuditEventsPage(AuditQuery{Limit: 10}))(t); total != 0 {
				t.Fatalf("%d events stored after a failed batch", total)
			}
		})
	}
}

func TestAuditEventsPageOrderAndFilters(t *testing.T) {
	s, _ := openTest(t)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	mk := func(typ string, entity, author int64, min int) AuditEvent {
		e := denial(entity, 1, author, "f")
		e.EntityType, e.CreatedAt = typ, at(min)
		return e
	}
	// Recorded out of time order: the list is by created_at, not by id.
	ok(s.RecordAudit(
		mk(AuditEntityGroup, 7, 2, 10),   // 1
		mk(AuditEntityGroup, 7, 3, 30),   // 2
		mk(AuditEntityGroup, 8, 2, 20),   // 3
		mk(AuditEntityProject, 7, 2, 40), // 4: same id, other type
		mk(AuditEntityGroup, 7, 2, 5),    // 5: older than all
		mk(AuditEntityGroup, 7, 3, 30),   // 6: same time as 2
	))(t)
	tests := []struct {
		name  string
		q     AuditQuery
		want  []int64
		total int
	}{
		{"all newest first", AuditQuery{}, []int64{4, 6, 2, 3, 1, 5}, 6},
		{"second page", AuditQuery{Offset: 2, Limit: 2}, []int64{2, 3}, 6},
		{"past the end", AuditQuery{Offset: 6, Limit: 2}, nil, 6},
		{"groups", AuditQuery{EntityType: AuditEntityGroup}, []int64{6, 2, 3, 1, 5}, 5},
		{"group 7", AuditQuery{EntityType: AuditEntityGroup, EntityID: 7}, []int64{6, 2, 1, 5}, 4},
		{"project 7", AuditQuery{EntityType: AuditEntityProject, EntityID: 7}, []int64{4}, 1},
		{"user 7", AuditQuery{EntityType: AuditEntityUser, EntityID: 7}, nil, 0},
		{"group 7 by author 2", AuditQuery{EntityType: AuditEntityGroup, EntityID: 7, AuthorID: 2}, []int64{1, 5}, 2},
		{"author 3 anywhere", AuditQuery{AuthorID: 3, Offset: 1}, []int64{2}, 2},
		{"after, inclusive", AuditQuery{After: at(20)}, []int64{4, 6, 2, 3}, 4},
		{"before, inclusive", AuditQuery{Before: at(20)}, []int64{3, 1, 5}, 3},
		{"before, to the millisecond", AuditQuery{Before: at(20).Add(-time.Millisecond)}, []int64{1, 5}, 2},
		{"between", AuditQuery{After: at(10), Before: at(30)}, []int64{6, 2, 3, 1}, 4},
		{"one instant", AuditQuery{After: at(30), Before: at(30)}, []int64{6, 2}, 2},
		{"group 7 between, second", AuditQuery{EntityType: AuditEntityGroup, EntityID: 7, After: at(6), Before: at(30), Offset: 1},
			[]int64{2, 1}, 3},
		{"reversed bounds", AuditQuery{After: at(30), Before: at(10)}, nil, 0},
		{"before 1970", AuditQuery{Before: time.Unix(-1, 0)}, nil, 0},
		{"after year 3000", AuditQuery{After: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, nil, 0},
		{"no limit: only the total", AuditQuery{Limit: -1}, nil, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.q.Limit == 0 {
				tt.q.Limit = 20
			}
			got, total, err := s.AuditEventsPage(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) || total != tt.total {
				t.Fatalf("ids %v total %d, want %v total %d", ids(got), total, tt.want, tt.total)
			}
		})
	}
	var ve *ValidationError
	if _, _, err := s.AuditEventsPage(AuditQuery{EntityID: 7, Limit: 1}); !errors.As(err, &ve) || ve.Fields["entity_type"] == nil {
		t.Fatalf("entity id without type: %v", err)
	}
	if _, _, err := s.AuditEventsPage(AuditQuery{EntityType: "Namespace", Limit: 1}); !errors.As(err, &ve) {
		t.Fatalf("unknown entity type: %v", err)
	}
}

// TestAuditEventsPageMatchesAScan compares pages of random queries with a
// filter over every event, on events of random scopes, authors and times.
func TestAuditEventsPageMatchesAScan(t *testing.T) {
	s, _ := openTest(t)
	rng := rand.New(rand.NewPCG(3, 5))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var all []AuditEvent
	for range 10 {
		batch := make([]AuditEvent, 50)
		for i := range batch {
			e := denial(1+rng.Int64N(4), 1, 1+rng.Int64N(3), "f")
			e.EntityType = AuditEntityTypes[rng.IntN(len(AuditEntityTypes))]
			e.CreatedAt = t0.Add(time.Duration(rng.IntN(100)) * time.Second)
			batch[i] = e
		}
		all = append(all, ok(s.RecordAudit(batch...))(t)...)
	}
	slices.SortFunc(all, func(a, b AuditEvent) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return int(b.ID - a.ID)
	})
	for i := range 300 {
		var q AuditQuery
		if rng.IntN(2) == 0 {
			q.EntityType = AuditEntityTypes[rng.IntN(len(AuditEntityTypes))]
			if rng.IntN(2) == 0 {
				q.EntityID = 1 + rng.Int64N(4)
			}
		}
		if rng.IntN(3) == 0 {
			q.AuthorID = 1 + rng.Int64N(3)
		}
		if rng.IntN(2) == 0 {
			q.After = t0.Add(time.Duration(rng.IntN(110)-5) * time.Second)
		}
		if rng.IntN(2) == 0 {
			q.Before = t0.Add(time.Duration(rng.IntN(110)-5) * time.Second)
		}
		q.Offset, q.Limit = rng.IntN(40), 1+rng.IntN(30)
		var match []int64
		for _, e := range all {
			if (q.EntityType == "" || e.EntityType == q.EntityType) && (q.EntityID == 0 || e.EntityID == q.EntityID) &&
				(q.AuthorID == 0 || e.AuthorID == q.AuthorID) && (q.After.IsZero() || !e.CreatedAt.Before(q.After)) &&
				(q.Before.IsZero() || !e.CreatedAt.After(q.Before)) {
				match = append(match, e.ID)
			}
		}
		want := match[min(q.Offset, len(match)):min(q.Offset+q.Limit, len(match))]
		got, total, err := s.AuditEventsPage(q)
		if err != nil {
			t.Fatal(err)
		}
		if total != len(match) || !slices.Equal(ids(got), want) {
			t.Fatalf("query %d %+v: ids %v total %d, want %v total %d", i, q, ids(got), total, want, len(match))
		}
	}
}

func TestRecordAuditConcurrentWriters(t *testing.T) {
	s, _ := openTest(t)
	const writers, batches, per = 8, 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([]AuditEvent, per)
				for i := range evs {
					evs[i] = denial(int64(1+w%2), 1, int64(w+1), fmt.Sprintf("w%d-b%d-%d.jar", w, b, i))
				}
				got, err := s.RecordAudit(evs...)
				if err != nil {
					errs <- err
					return
				}
				// One transaction: a batch's ids are consecutive.
				for i := 1; i < len(got); i++ {
					if got[i].ID != got[i-1].ID+1 {
						errs <- fmt.Errorf("batch ids %v are not consecutive", ids(got))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = writers * batches * per
	all, n := ok2(s.AuditEventsPage(AuditQuery{Limit: total + 1}))(t)
	if n != total || len(all) != total {
		t.Fatalf("total %d, %d listed; want %d", n, len(all), total)
	}
	seen := map[int64]bool{}
	files := map[string]bool{}
	for _, e := range all {
		seen[e.ID], files[e.TargetDetails] = true, true
	}
	if len(seen) != total || len(files) != total {
		t.Fatalf("%d distinct ids, %d distinct files; want %d", len(seen), len(files), total)
	}
	// The counters agree with the indexes.
	for g := int64(1); g <= 2; g++ {
		_, counted := ok2(s.AuditEventsPage(AuditQuery{EntityType: AuditEntityGroup, EntityID: g, After: time.Unix(0, 0)}))(t)
		_, fromCounter := ok2(s.AuditEventsPage(AuditQuery{EntityType: AuditEntityGroup, EntityID: g}))(t)
		if counted != total/2 || fromCounter != counted {
			t.Fatalf("group %d: %d counted, %d from the counter; want %d", g, counted, fromCounter, total/2)
		}
	}
}

// BenchmarkRecordAudit records batches of 64 denials, as the proxy flushes
// them; the figure to read is µs/event (one transaction and its fsync per
// batch, shared by 64 events).
func BenchmarkRecordAudit(b *testing.B) {
	s, err := openAt(b, b.TempDir(), Options{SecretKey: make([]byte, 32)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 64
	evs := make([]AuditEvent, batch)
	for i := range evs {
		evs[i] = denial(int64(1+i%4), int64(1+i%8), int64(1+i%16),
			fmt.Sprintf("org/example/lib%d/1.%d/lib%d-1.%d.jar", i, i, i, i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.RecordAudit(evs...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/event")
	b.ReportMetric(float64(s.Stats().FileBytes)/float64(b.N*batch), "file-bytes/event")
}

// BenchmarkAuditEventsPage measures one page of 20 out of 1,000,000 audit
// events in 100 groups, one of which holds a tenth of them, by 50 authors.
// The fixture is built once per run; run it with
//
//	go test -run '^$' -bench BenchmarkAuditEventsPage -benchtime 2000x ./store/
func BenchmarkAuditEventsPage(b *testing.B) {
	const total, groups, authors, batch = 1_000_000, 100, 50, 20_000
	s, err := openAt(b, b.TempDir(), Options{SecretKey: make([]byte, 32)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	evs := make([]AuditEvent, 0, batch)
	for i := range total {
		g := 2 + rng.Int64N(groups-1)
		if i%10 == 0 {
			g = 1
		}
		e := denial(g, 1+rng.Int64N(20), 1+rng.Int64N(authors), fmt.Sprintf("org/example/lib%d/1.0/lib-1.0.jar", i))
		e.CreatedAt = t0.Add(time.Duration(i) * 3 * time.Second)
		if evs = append(evs, e); len(evs) == batch {
			if _, err := s.RecordAudit(evs...); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	b.Logf("fixture: %d events in %v, %d bytes (%.0f bytes/event)", total, time.Since(start),
		s.Stats().FileBytes, float64(s.Stats().FileBytes)/total)
	mid := t0.Add(total / 2 * 3 * time.Second)
	for _, bc := range []struct {
		name string
		q    AuditQuery
	}{
		{"all newest", AuditQuery{}},
		{"all page 50", AuditQuery{Offset: 980}},
		{"hot group newest", AuditQuery{EntityType: AuditEntityGroup, EntityID: 1}},
		{"small group newest", AuditQuery{EntityType: AuditEntityGroup, EntityID: 2}},
		{"hot group created_after (50,000 counted)", AuditQuery{EntityType: AuditEntityGroup, EntityID: 1, After: mid}},
		{"hot group one author (100,000 counted)", AuditQuery{EntityType: AuditEntityGroup, EntityID: 1, AuthorID: 3}},
		{"one day of all groups (28,800 counted)", AuditQuery{After: mid, Before: mid.Add(24 * time.Hour)}},
	} {
		bc.q.Limit = 20
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.AuditEventsPage(bc.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
