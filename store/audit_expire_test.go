package store

import (
	"errors"
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
