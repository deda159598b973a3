package store

import (
	"testing"
	"time"

	"registryd/store/kv"
)

func trafficKeys(t *testing.T, s *Store, bkt []byte) []time.Time {
	t.Helper()
	var out []time.Time
	noErr(t, s.db.View(func(tx kv.Tx) error {
		return tx.Bucket(bkt).ForEach(func(k, _ []byte) error {
			out = append(out, trafficKeyTime(k))
			return nil
		})
	}))
	return out
}

func TestTrafficRecordAndRead(t *testing.T) {
	s, _ := openTest(t)
	base := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	reg, upA := TrafficOf{TrafficRegistry, 7}, TrafficOf{TrafficUpstream, 3}
	// Two nodes record the same minutes; the reads sum them.
	for i := 1; i <= 3; i++ {
		at := base.Add(time.Duration(i) * time.Minute)
		noErr(t, s.RecordTraffic(1, TrafficSample{At: at, Series: map[TrafficOf]TrafficCounts{
			reg: {Requests: int64(i), Hits: 1, ServedBytes: 100, SavedBytes: 40},
			upA: {Requests: 2, UpstreamRequests: 1},
			// All zero: not recorded.
			{TrafficRegistry, 8}: {},
		}}))
		noErr(t, s.RecordTraffic(2, TrafficSample{At: at, Series: map[TrafficOf]TrafficCounts{
			reg: {Requests: 10, Misses: 10, ServedBytes: 1 << 40},
		}}))
	}
	got := ok(s.Traffic(base, base.Add(3*time.Minute), time.Minute, reg))(t)[0]
	want := []TrafficCounts{
		{Requests: 11, Hits: 1, Misses: 10, ServedBytes: 100 + 1<<40, SavedBytes: 40},
		{Requests: 12, Hits: 1, Misses: 10, ServedBytes: 100 + 1<<40, SavedBytes: 40},
		{Requests: 13, Hits: 1, Misses: 10, ServedBytes: 100 + 1<<40, SavedBytes: 40},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d steps, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// One step of three minutes; the upstream's own series.
	if got := ok(s.Traffic(base, base.Add(3*time.Minute), 3*time.Minute, upA))(t)[0]; len(got) != 1 ||
		got[0] != (TrafficCounts{Requests: 6, UpstreamRequests: 3}) {
		t.Fatalf("upstream over 3 minutes: %+v", got)
	}
	// The hourly points hold the same sums, one per node.
	hours := ok(s.Traffic(base, base.Add(time.Hour), time.Hour, reg))(t)[0]
	if len(hours) != 1 || hours[0] != (TrafficCounts{Requests: 36, Hits: 3, Misses: 30, ServedBytes: 300 + 3<<40, SavedBytes: 120}) {
		t.Fatalf("hourly: %+v", hours)
	}
	if keys := trafficKeys(t, s, bktTrafficHours); len(keys) != 2 || !keys[0].Equal(base) {
		t.Fatalf("hourly keys: %v", keys)
	}
	// A series nobody recorded, and an empty range.
	if got := ok(s.Traffic(base, base.Add(2*time.Minute), time.Minute, TrafficOf{TrafficRegistry, 8}))(t)[0]; len(got) != 2 || !got[0].IsZero() || !got[1].IsZero() {
		t.Fatalf("unrecorded series: %+v", got)
	}
	if got := ok(s.Traffic(base, base, time.Minute, reg))(t)[0]; len(got) != 0 {
		t.Fatalf("empty range: %+v", got)
	}
}

func TestTrafficRetention(t *testing.T) {
	s, _ := openTest(t)
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	reg := TrafficOf{TrafficRegistry, 1}
	one := map[TrafficOf]TrafficCounts{reg: {Requests: 1}}
	// A point every 6 hours for 40 days.
	for at := base.Add(6 * time.Hour); !at.After(base.Add(40 * 24 * time.Hour)); at = at.Add(6 * time.Hour) {
		noErr(t, s.RecordTraffic(1, TrafficSample{At: at, Series: one}))
	}
	last := base.Add(40 * 24 * time.Hour)
	for _, at := range trafficKeys(t, s, bktTrafficPoints) {
		if at.Before(last.Add(-TrafficPointsKept)) {
			t.Fatalf("point of %s kept at %s", at, last)
		}
	}
	hours := trafficKeys(t, s, bktTrafficHours)
	if len(hours) == 0 || hours[0].Before(last.Add(-TrafficHoursKept-time.Hour)) {
		t.Fatalf("hourly points from %v kept at %s", hours, last)
	}
	if len(hours) != 30*4+1 {
		t.Fatalf("%d hourly points kept, want %d", len(hours), 30*4+1)
	}
	// An empty sample still deletes what expired.
	noErr(t, s.RecordTraffic(1, TrafficSample{At: last.Add(48 * time.Hour)}))
	if keys := trafficKeys(t, s, bktTrafficPoints); len(keys) != 0 {
		t.Fatalf("points after 2 idle days: %v", keys)
	}
}

func TestTrafficDeleteBatch(t *testing.T) {
	s, _ := openTest(t)
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	one := map[TrafficOf]TrafficCounts{{TrafficUpstream, 1}: {Requests: 1}}
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		b := tx.Bucket(bktTrafficPoints)
		for i := range trafficDeleteBatch + 10 {
			if err := b.Put(trafficKey(base.Add(time.Duration(i)*time.Second), 9), encodeTraffic(one)); err != nil {
				return err
			}
		}
		return nil
	}))
	later := base.Add(48 * time.Hour)
	noErr(t, s.RecordTraffic(1, TrafficSample{At: later, Series: one}))
	if n := len(trafficKeys(t, s, bktTrafficPoints)); n != 10+1 {
		t.Fatalf("%d points after one recording, want 11 (a batch deleted)", n)
	}
	noErr(t, s.RecordTraffic(1, TrafficSample{At: later.Add(time.Minute), Series: one}))
	if n := len(trafficKeys(t, s, bktTrafficPoints)); n != 2 {
		t.Fatalf("%d points after two recordings, want 2", n)
	}
}

func TestTrafficSeriesCap(t *testing.T) {
	series := map[TrafficOf]TrafficCounts{}
	for i := range MaxTrafficSeries + 5 {
		series[TrafficOf{TrafficRegistry, int64(i + 1)}] = TrafficCounts{Requests: int64(i + 1)}
	}
	capped := capTraffic(series)
	if len(capped) != MaxTrafficSeries {
		t.Fatalf("%d series kept", len(capped))
	}
	for i := 1; i <= 5; i++ {
		if _, ok := capped[TrafficOf{TrafficRegistry, int64(i)}]; ok {
			t.Fatalf("series %d (of the fewest requests) kept", i)
		}
	}
	// A record survives its round trip, and a truncated one is refused.
	rec := encodeTraffic(capped)
	back := map[TrafficOf]TrafficCounts{}
	noErr(t, decodeTraffic(rec, func(k TrafficOf, c TrafficCounts) { back[k] = c }))
	if len(back) != len(capped) || back[TrafficOf{TrafficRegistry, MaxTrafficSeries + 5}].Requests != MaxTrafficSeries+5 {
		t.Fatalf("round trip: %d series", len(back))
	}
	if err := decodeTraffic(rec[:len(rec)-1], func(TrafficOf, TrafficCounts) {}); err == nil {
		t.Fatal("a truncated record decoded")
	}
}

// updateCounter counts the write transactions of an engine.
type updateCounter struct {
	kv.DB
	updates int
}

func (u *updateCounter) Update(fn func(kv.Tx) error) error {
	u.updates++
	return u.DB.Update(fn)
}

func TestTrafficIdleWritesNothing(t *testing.T) {
	boltOnly(t, "wraps the bbolt engine to count its write transactions")
	db, err := boltAt(t.TempDir(), time.Second)
	noErr(t, err)
	eng := &updateCounter{DB: db}
	s, err := Open(Options{Engine: eng, SecretKey: testKey, Now: newClock().Now})
	noErr(t, err)
	closeChecked(t, s)
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	noErr(t, s.RecordTraffic(1, TrafficSample{At: base, Series: map[TrafficOf]TrafficCounts{{TrafficRegistry, 1}: {Requests: 1}}}))
	before := eng.updates
	// Idle intervals with nothing expired: no write transaction.
	for i := 1; i <= 3; i++ {
		noErr(t, s.RecordTraffic(1, TrafficSample{At: base.Add(time.Duration(i) * time.Minute),
			Series: map[TrafficOf]TrafficCounts{{TrafficRegistry, 1}: {}}}))
	}
	if eng.updates != before {
		t.Fatalf("%d write transactions for idle intervals", eng.updates-before)
	}
	// Idle, but the first point expired: one transaction deletes it.
	noErr(t, s.RecordTraffic(1, TrafficSample{At: base.Add(TrafficPointsKept + time.Minute)}))
	if eng.updates != before+1 {
		t.Fatalf("%d write transactions to delete an expired point, want 1", eng.updates-before)
	}
	if keys := trafficKeys(t, s, bktTrafficPoints); len(keys) != 0 {
		t.Fatalf("points left: %v", keys)
	}
}
