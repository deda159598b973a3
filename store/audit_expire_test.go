package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Expiry deletes the events older than the cutoff, oldest first, in
// batches of the limit, with their index keys and counters; younger events
// (one at the cutoff's millisecond included) stay, and every listing and
// counter agrees with what is left.
func TestExpireAuditEvents(t *testing.T) {
	s, _ := openTest(t)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	var in []AuditEvent
	// Recorded out of time order, over two groups and a project.
	for i, min := range []int{9, 1, 5, 3, 7, 2, 8, 4, 6, 0} {
		e := denial(int64(7+i%2), 1, int64(2+i%3), "f.jar")
		if i%5 == 4 {
			e.EntityType = AuditEntityProject
		}
		e.CreatedAt = at(min)
		in = append(in, e)
	}
	rec := ok(s.RecordAudit(in...))(t)
	cutoff := at(5) // 0..4 go, 5..9 stay

	var batches []int
	for {
		n, more, err := s.ExpireAuditEvents(cutoff, 2)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, n)
		if !more {
			break
		}
		if len(batches) > 10 {
			t.Fatal("expiry does not end")
		}
	}
	if !slices.Equal(batches, []int{2, 2, 1}) {
		t.Fatalf("batches %v, want [2 2 1]", batches)
	}
	if n, more, err := s.ExpireAuditEvents(cutoff, 2); n != 0 || more || err != nil {
		t.Fatalf("again: %d, %v, %v", n, more, err)
	}
	for _, e := range rec {
		_, err := s.AuditEvent(e.ID)
		if old := e.CreatedAt.Before(cutoff); old != errors.Is(err, ErrNotFound) {
			t.Fatalf("event %d created %v: %v after expiry at %v", e.ID, e.CreatedAt, err, cutoff)
		}
	}
	all, total := ok2(s.AuditEventsPage(AuditQuery{Limit: 100}))(t)
	if total != 5 || len(all) != 5 || !all[len(all)-1].CreatedAt.Equal(cutoff) {
		t.Fatalf("left: %d of total %d, oldest %v", len(all), total, all[len(all)-1].CreatedAt)
	}
	// Counters (unfiltered totals) and index scans (a date filter) agree,
	// for every scope.
	for _, q := range []AuditQuery{{}, {EntityType: AuditEntityGroup}, {EntityType: AuditEntityProject},
		{EntityType: AuditEntityGroup, EntityID: 7}, {EntityType: AuditEntityGroup, EntityID: 8},
		{EntityType: AuditEntityProject, EntityID: 7}, {EntityType: AuditEntityProject, EntityID: 8}} {
		_, fromCounter := ok2(s.AuditEventsPage(q))(t)
		q.After = time.Unix(0, 0)
		evs, scanned := ok2(s.AuditEventsPage(AuditQuery{EntityType: q.EntityType, EntityID: q.EntityID, After: q.After, Limit: 100}))(t)
		want := 0
		for _, e := range all {
			if (q.EntityType == "" || e.EntityType == q.EntityType) && (q.EntityID == 0 || e.EntityID == q.EntityID) {
				want++
			}
		}
		if fromCounter != want || scanned != want || len(evs) != want {
			t.Fatalf("%+v: counter %d, scan %d (%d listed), want %d", q, fromCounter, scanned, len(evs), want)
		}
	}
	// Nothing before 1970, and no limit, deletes nothing.
	if n, _, err := s.ExpireAuditEvents(time.Unix(-1, 0), 10); n != 0 || err != nil {
		t.Fatalf("before 1970: %d, %v", n, err)
	}
	if n, _, err := s.ExpireAuditEvents(at(100), 0); n != 0 || err != nil {
		t.Fatalf("limit 0: %d, %v", n, err)
	}
	// Everything: the counters are gone, not negative.
	if n, more, err := s.ExpireAuditEvents(at(100), 100); n != 5 || more || err != nil {
		t.Fatalf("the rest: %d, %v, %v", n, more, err)
	}
	if _, total := ok2(s.AuditEventsPage(AuditQuery{EntityType: AuditEntityGroup, EntityID: 7}))(t); total != 0 {
		t.Fatalf("group 7 counter %d after every event expired", total)
	}
	// Ids go on from where they were: an expired id is never reused.
	if e := ok(s.RecordAudit(denial(7, 1, 2, "g.jar")))(t)[0]; e.ID != rec[len(rec)-1].ID+1 {
		t.Fatalf("id after expiry %d, want %d", e.ID, rec[len(rec)-1].ID+1)
	}
}

// Expired events leave their pages to the next ones: recording as many
// events again after expiring them all does not grow the file (bbolt's
// freelist; PostgreSQL's vacuum is its own business).
func TestExpiredAuditSpaceIsReused(t *testing.T) {
	boltOnly(t, "the size of the bbolt file")
	s, _ := openTest(t)
	const n, write = 20_000, 2_000
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	record := func(from int) {
		evs := make([]AuditEvent, write)
		for done := 0; done < n; done += write {
			for i := range evs {
				evs[i] = denial(int64(1+i%10), 1, int64(1+i%5), fmt.Sprintf("org/example/lib%d/1.0/lib%d-1.0.jar", i, i))
				evs[i].CreatedAt = t0.Add(time.Duration(from+done+i) * time.Second)
			}
			if _, err := s.RecordAudit(evs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	record(0)
	full := s.Stats().FileBytes
	for more := true; more; {
		var err error
		if _, more, err = s.ExpireAuditEvents(t0.Add(n*time.Second), 500); err != nil {
			t.Fatal(err)
		}
	}
	record(n)
	if again := s.Stats().FileBytes; again > full+full/10 {
		t.Fatalf("the file grew from %d to %d bytes for as many events as were expired", full, again)
	}
	if _, total := ok2(s.AuditEventsPage(AuditQuery{}))(t); total != n {
		t.Fatalf("%d events, want %d", total, n)
	}
}

// BenchmarkExpireAuditEvents deletes batches of 500 expired events (the
// proxy's batch) out of 100,000, one minute apart; the figures to read are
// ms/batch (how long other writers may wait for one) and µs/event.
//
//	go test -run '^$' -bench BenchmarkExpireAuditEvents -benchtime 100x ./store/
func BenchmarkExpireAuditEvents(b *testing.B) {
	const total, batch, write = 100_000, 500, 20_000
	s, err := openAt(b, b.TempDir(), Options{SecretKey: make([]byte, 32)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := make([]AuditEvent, write)
	for n := 0; n < total; n += write {
		for i := range evs {
			evs[i] = denial(int64(1+i%100), int64(1+i%8), int64(1+i%50), "org/example/lib/1.0/lib-1.0.jar")
			evs[i].CreatedAt = t0.Add(time.Duration(n+i) * time.Minute)
		}
		if _, err := s.RecordAudit(evs...); err != nil {
			b.Fatal(err)
		}
	}
	if b.N*batch > total {
		b.Fatalf("%d batches of %d: more than the %d events", b.N, batch, total)
	}
	cutoff := t0.Add(total * time.Minute)
	b.ResetTimer()
	for b.Loop() {
		if n, _, err := s.ExpireAuditEvents(cutoff, batch); err != nil || n != batch {
			b.Fatalf("%d deleted: %v", n, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/event")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/batch")
}
