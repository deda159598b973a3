package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"registryd/store/kv"
)

// Traffic history: the counts the web console draws (requests, hits,
// bytes served, upstream traffic saved, per registry and per upstream over
// time). Each node records what it counted in one interval as one point
// (bucket traffic_points, kept TrafficPointsKept), and adds the same counts
// to its point of the hour (bucket traffic_hours, kept TrafficHoursKept),
// in one transaction that also deletes points past their retention. Keys
// are time first, then the node, so a read of a time range is one key
// range that sums the nodes of a cluster, and any node deletes every
// node's old points (a node that is gone leaves none behind).

// TrafficKind says what a traffic series counts: a registry or an upstream.
type TrafficKind byte

const (
	TrafficRegistry TrafficKind = 'r'
	TrafficUpstream TrafficKind = 'u'
)

// TrafficOf names one series: a registry's or an upstream's (an upstream's
// counts are those of all its registries).
type TrafficOf struct {
	Kind TrafficKind
	ID   int64
}

// TrafficCounts are one series' counts over an interval.
type TrafficCounts struct {
	// Requests are downloads; Hits those answered without an upstream
	// download of their own (a fresh or stale cached copy, one the
	// upstream confirmed unchanged, or a share of a fetch in flight);
	// Misses those the upstreams were asked for.
	Requests, Hits, Misses int64
	// ServedBytes are body bytes sent to clients (registries only);
	// SavedBytes those of them not fetched from an upstream for the
	// request (everything but misses): the upstream traffic saved.
	ServedBytes, SavedBytes int64
	// UpstreamRequests are requests sent to the upstream (upstreams
	// only), UpstreamFailures those that failed (error status, timeout,
	// network error, refused answer).
	UpstreamRequests, UpstreamFailures int64
}

const nTrafficFields = 7

func (c *TrafficCounts) fields() [nTrafficFields]*int64 {
	return [nTrafficFields]*int64{&c.Requests, &c.Hits, &c.Misses, &c.ServedBytes, &c.SavedBytes,
		&c.UpstreamRequests, &c.UpstreamFailures}
}

// Add adds o to c.
func (c *TrafficCounts) Add(o TrafficCounts) {
	cf, of := c.fields(), o.fields()
	for i := range cf {
		*cf[i] += *of[i]
	}
}

// IsZero reports whether every count is 0.
func (c TrafficCounts) IsZero() bool { return c == TrafficCounts{} }

// TrafficSample is what one node counted in one interval, ending At.
type TrafficSample struct {
	At     time.Time
	Series map[TrafficOf]TrafficCounts
}

const (
	// TrafficPointsKept is how long the points of each interval are kept.
	TrafficPointsKept = 24 * time.Hour
	// TrafficHoursKept is how long the hourly points are kept.
	TrafficHoursKept = 30 * 24 * time.Hour
	// MaxTrafficSeries caps the series of one point (and of one hourly
	// point): past it, those with the fewest requests are not recorded.
	MaxTrafficSeries = 2000
	// trafficDeleteBatch caps the expired points one recording deletes, so
	// that its transaction stays small after a long stop; the rest go with
	// the next ones.
	trafficDeleteBatch = 500
)

const trafficRecordVersion = 1

// encodeTraffic is a record: a version byte, the number of series, then
// each series' kind byte, id and counts as uvarints, in key order.
func encodeTraffic(series map[TrafficOf]TrafficCounts) []byte {
	keys := make([]TrafficOf, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Kind != keys[j].Kind {
			return keys[i].Kind < keys[j].Kind
		}
		return keys[i].ID < keys[j].ID
	})
	b := make([]byte, 0, 2+len(keys)*12)
	b = append(b, trafficRecordVersion)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		c := series[k]
		b = append(b, byte(k.Kind))
		b = binary.AppendUvarint(b, uint64(k.ID))
		for _, f := range c.fields() {
			b = binary.AppendUvarint(b, uint64(max(*f, 0)))
		}
	}
	return b
}

var errTrafficRecord = errors.New("store: corrupt traffic record")

// decodeTraffic calls fn for each series of a record.
func decodeTraffic(b []byte, fn func(TrafficOf, TrafficCounts)) error {
	if len(b) == 0 || b[0] != trafficRecordVersion {
		return errTrafficRecord
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	n, ok := next()
	if !ok {
		return errTrafficRecord
	}
	for range n {
		if len(b) == 0 {
			return errTrafficRecord
		}
		k := TrafficOf{Kind: TrafficKind(b[0])}
		b = b[1:]
		id, ok := next()
		if !ok {
			return errTrafficRecord
		}
		k.ID = int64(id)
		var c TrafficCounts
		for _, f := range c.fields() {
			v, ok := next()
			if !ok {
				return errTrafficRecord
			}
			*f = int64(v)
		}
		fn(k, c)
	}
	return nil
}

func trafficKey(at time.Time, node uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(at.UnixMilli()))
	binary.BigEndian.PutUint64(k[8:], node)
	return k
}

func trafficKeyTime(k []byte) time.Time {
	return time.UnixMilli(int64(binary.BigEndian.Uint64(k))).UTC()
}

// capTraffic keeps the MaxTrafficSeries series with the most requests
// (then the most bytes served, then the lowest key).
func capTraffic(series map[TrafficOf]TrafficCounts) map[TrafficOf]TrafficCounts {
	if len(series) <= MaxTrafficSeries {
		return series
	}
	keys := make([]TrafficOf, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := series[keys[i]], series[keys[j]]
		switch {
		case a.Requests != b.Requests:
			return a.Requests > b.Requests
		case a.ServedBytes != b.ServedBytes:
			return a.ServedBytes > b.ServedBytes
		case keys[i].Kind != keys[j].Kind:
			return keys[i].Kind < keys[j].Kind
		}
		return keys[i].ID < keys[j].ID
	})
	out := make(map[TrafficOf]TrafficCounts, MaxTrafficSeries)
	for _, k := range keys[:MaxTrafficSeries] {
		out[k] = series[k]
	}
	return out
}

// RecordTraffic stores what node counted in one interval: its point, the
// same counts added to its point of the hour, and the deletion of points
// past their retention (at most trafficDeleteBatch of each kind), in one
// transaction. Series whose counts are all 0 are left out; a sample with
// none writes no point, and no transaction at all unless points expired.
func (s *Store) RecordTraffic(node uint64, smp TrafficSample) error {
	series := map[TrafficOf]TrafficCounts{}
	for k, c := range smp.Series {
		if !c.IsZero() {
			series[k] = c
		}
	}
	series = capTraffic(series)
	at := smp.At.UTC()
	// A point is the interval ending at its time: one at 10:00 counts
	// to the hour from 9:00.
	hour := at.Add(-time.Millisecond).Truncate(time.Hour)
	var point []byte
	if len(series) > 0 {
		point = encodeTraffic(series)
	} else {
		// Idle: no write transaction unless a point expired.
		expired := false
		if err := s.db.View(func(tx kv.Tx) error {
			expired = firstBefore(tx.Bucket(bktTrafficPoints), at.Add(-TrafficPointsKept)) ||
				firstBefore(tx.Bucket(bktTrafficHours), hour.Add(-TrafficHoursKept))
			return nil
		}); err != nil || !expired {
			return err
		}
	}
	return s.db.Update(func(tx kv.Tx) error {
		points, hours := tx.Bucket(bktTrafficPoints), tx.Bucket(bktTrafficHours)
		if point != nil {
			if err := points.Put(trafficKey(at, node), point); err != nil {
				return err
			}
			hk := trafficKey(hour, node)
			sum := map[TrafficOf]TrafficCounts{}
			if old := hours.Get(hk); old != nil {
				if err := decodeTraffic(old, func(k TrafficOf, c TrafficCounts) { sum[k] = c }); err != nil {
					return fmt.Errorf("%w (hour %s)", err, hour.Format(time.RFC3339))
				}
			}
			for k, c := range series {
				v := sum[k]
				v.Add(c)
				sum[k] = v
			}
			if err := hours.Put(hk, encodeTraffic(capTraffic(sum))); err != nil {
				return err
			}
		}
		if err := deleteTrafficBefore(points, at.Add(-TrafficPointsKept)); err != nil {
			return err
		}
		return deleteTrafficBefore(hours, hour.Add(-TrafficHoursKept))
	})
}

// firstBefore reports whether b has a key of a time before cutoff.
func firstBefore(b kv.Bucket, cutoff time.Time) bool {
	k, _ := b.Cursor().First()
	return k != nil && string(k) < string(trafficKey(cutoff, 0))
}

func deleteTrafficBefore(b kv.Bucket, cutoff time.Time) error {
	end := trafficKey(cutoff, 0)
	var old [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && string(k) < string(end) && len(old) < trafficDeleteBatch; k, _ = c.Next() {
		old = append(old, append([]byte(nil), k...))
	}
	for _, k := range old {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Traffic sums the counts of each series of in steps of step from from:
// the i-th element of a series' answer covers [from+i*step,
// from+(i+1)*step), up to to, summed over the nodes. A step of an hour or
// more reads the hourly points (kept TrafficHoursKept), a shorter one the
// points of each interval (kept TrafficPointsKept): a step shorter than
// the sampling interval leaves gaps. One read serves every series asked.
func (s *Store) Traffic(from, to time.Time, step time.Duration, of ...TrafficOf) ([][]TrafficCounts, error) {
	out := make([][]TrafficCounts, len(of))
	if step <= 0 || !to.After(from) {
		return out, nil
	}
	n := int((to.Sub(from) + step - 1) / step)
	which := make(map[TrafficOf][]int, len(of))
	for i, o := range of {
		out[i] = make([]TrafficCounts, n)
		which[o] = append(which[o], i)
	}
	hourly := step >= time.Hour
	bkt := bktTrafficPoints
	if hourly {
		bkt = bktTrafficHours
	}
	err := s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bkt)
		if b == nil {
			return nil
		}
		// A point is the interval ending at its time: one at from belongs
		// to the step before, one at to to the last.
		start, end := trafficKey(from.Add(time.Millisecond), 0), trafficKey(to.Add(time.Millisecond), 0)
		if hourly {
			// An hourly point is the hour starting at its time.
			start, end = trafficKey(from, 0), trafficKey(to, 0)
		}
		c := b.Cursor()
		for k, v := c.Seek(start); k != nil && string(k) < string(end); k, v = c.Next() {
			at := trafficKeyTime(k)
			if !hourly {
				at = at.Add(-time.Millisecond)
			}
			i := int(at.Sub(from) / step)
			if i < 0 || i >= n {
				continue
			}
			if err := decodeTraffic(v, func(k TrafficOf, cs TrafficCounts) {
				for _, j := range which[k] {
					out[j][i].Add(cs)
				}
			}); err != nil {
				return fmt.Errorf("%w (at %s)", err, trafficKeyTime(k).Format(time.RFC3339))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
