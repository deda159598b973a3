package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"registryd/store/kv"
)

// AuditQuery selects one page of audit events.
type AuditQuery struct {
	// EntityType is one of AuditEntityTypes, or "" for any; EntityID (which
	// needs EntityType) narrows to one entity, 0 for any.
	EntityType string
	EntityID   int64
	// AuthorID keeps only the events of one author (GitLab's rule for group
	// members below owner); 0 for any.
	AuthorID int64
	// After and Before bound created_at, both inclusive (GitLab's
	// created_after and created_before). Zero: unbounded.
	After, Before time.Time

	Offset, Limit int
}

// AuditEventsPage returns one page of audit events, newest first (created_at,
// then id, both descending), and how many match in all. A page walks the
// scope's index from the newest matching key and reads only the records it
// returns: O(offset + limit). The total comes from counters when neither a
// date nor an author filter is set; otherwise the matching index range is
// counted (index keys only, no record is read).
func (s *Store) AuditEventsPage(q AuditQuery) ([]AuditEvent, int, error) {
	var out []AuditEvent
	total := 0
	if q.EntityID != 0 && q.EntityType == "" {
		return nil, 0, invalid("entity_type", "is missing")
	}
	code := byte(0)
	if q.EntityType != "" {
		if code = auditEntityCode(q.EntityType); code == 0 {
			return nil, 0, invalid("entity_type", "does not have a valid value")
		}
	}
	if (!q.After.IsZero() && !q.Before.IsZero() && q.Before.Before(q.After)) ||
		(!q.Before.IsZero() && q.Before.UnixMilli() < 0) {
		return nil, 0, nil // an empty range
	}
	err := s.db.View(func(tx kv.Tx) error {
		var b kv.Bucket
		var prefix []byte
		var countKey []byte
		switch {
		case q.EntityID != 0:
			b, prefix = tx.Bucket(bktAuditByEntity), auditEntityPrefix(code, q.EntityID)
			countKey = auditCountKeys(code, q.EntityID)[2]
		case code != 0:
			b, prefix = tx.Bucket(bktAuditByType), auditTypePrefix(code)
			countKey = auditCountKeys(code, 0)[1]
		default:
			b, countKey = tx.Bucket(bktAuditByTime), []byte{'g'}
		}
		r := auditRange(prefix, q.After, q.Before)
		author := []byte(nil)
		if q.AuthorID != 0 {
			author = itob(q.AuthorID)
		}
		if q.After.IsZero() && q.Before.IsZero() && author == nil {
			if v := tx.Bucket(bktAuditCounts).Get(countKey); v != nil {
				total = int(binary.BigEndian.Uint64(v))
			}
		} else {
			c := b.Cursor()
			for k, v := r.last(c); k != nil; k, v = r.prev(c) {
				if author == nil || bytes.Equal(v, author) {
					total++
				}
			}
		}
		if q.Limit <= 0 || q.Offset >= total {
			return nil
		}
		events := tx.Bucket(bktAudit)
		c := b.Cursor()
		skipped := 0
		for k, v := r.last(c); k != nil && len(out) < q.Limit; k, v = r.prev(c) {
			if author != nil && !bytes.Equal(v, author) {
				continue
			}
			if skipped < q.Offset {
				skipped++
				continue
			}
			id := btoi(k[len(k)-8:])
			raw := events.Get(itob(id))
			if raw == nil {
				return fmt.Errorf("store: audit event %d is indexed but missing", id)
			}
			var e AuditEvent
			if err := decodeAuditEvent(id, raw, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, total, err
}

// auditKeyRange is the keys of one index scope between two times, walked
// newest first: lo is the first key that may match, hi the first key past
// the range (nil: to the end of the prefix).
type auditKeyRange struct {
	prefix, lo, hi []byte
}

func auditRange(prefix []byte, after, before time.Time) auditKeyRange {
	r := auditKeyRange{prefix: prefix, lo: prefix}
	if !after.IsZero() {
		r.lo = auditTimeKey(prefix, max(after.UnixMilli(), 0), 0)
	}
	if !before.IsZero() {
		// Inclusive to the millisecond: everything created before the next
		// one. AuditEventsPage answers a bound before 1970 without a walk.
		r.hi = auditTimeKey(prefix, before.UnixMilli()+1, 0)[:len(prefix)+8]
	} else {
		r.hi = prefixEnd(prefix)
	}
	return r
}

// last positions c on the newest key of the range.
func (r auditKeyRange) last(c kv.Cursor) ([]byte, []byte) {
	var k, v []byte
	if r.hi == nil {
		k, v = c.Last()
	} else if k, v = c.Seek(r.hi); k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	return r.check(k, v)
}

func (r auditKeyRange) prev(c kv.Cursor) ([]byte, []byte) { return r.check(c.Prev()) }

func (r auditKeyRange) check(k, v []byte) ([]byte, []byte) {
	if k == nil || !bytes.HasPrefix(k, r.prefix) || bytes.Compare(k, r.lo) < 0 ||
		(r.hi != nil && bytes.Compare(k, r.hi) >= 0) {
		return nil, nil
	}
	return k, v
}
