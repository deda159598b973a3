package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"registryd/store/kv"
)

// EventQuery selects one page of events. Exactly one scope applies, checked
// in this order: ProjectID, AuthorID, Projects (non-nil), All.
type EventQuery struct {
	// ProjectID lists the events of one project.
	ProjectID int64
	// AuthorID lists the events by one user; HiddenProjects leaves out the
	// events of projects the caller may not read.
	AuthorID       int64
	HiddenProjects map[int64]bool
	// Projects lists the events of these projects (GET /events?scope=all for
	// a caller who may read only some projects). Empty and non-nil: nothing.
	Projects []int64
	// All lists every event.
	All bool

	// Action is one of EventActions, or "" for any.
	Action string
	// TargetType is a class name (see EventTargetFilters), or "" for any.
	TargetType string
	// CreatedBefore keeps events created strictly before it; CreatedFrom
	// keeps events created at or after it. Zero: unbounded.
	CreatedBefore, CreatedFrom time.Time
	// Asc sorts by id ascending; the default is descending.
	Asc bool

	Offset, Limit int
}

// EventsPage returns one page of events and how many match in all. A page
// reads its entries from the scope's index and only the records it returns:
// unfiltered and action-filtered lists cost O(offset + page) and their total
// comes from counters; target_type and date filters also scan the scope's
// index (fixed-size headers, no decoding) to count.
func (s *Store) EventsPage(q EventQuery) ([]Event, int, error) {
	var out []Event
	total := 0
	err := s.db.View(func(tx kv.Tx) error {
		act := byte(0)
		if q.Action != "" {
			if act = actionCode(q.Action); act == 0 {
				return invalid("action", "does not have a valid value")
			}
		}
		tgt := byte(0)
		if q.TargetType != "" {
			tgt = targetCode(q.TargetType)
		}
		srcs, actByIndex := q.sources(tx, act)
		var from, before int64 = 0, 0
		if !q.CreatedFrom.IsZero() {
			from = q.CreatedFrom.UnixMilli()
		}
		if !q.CreatedBefore.IsZero() {
			before = q.CreatedBefore.UnixMilli()
		}
		scan := tgt != 0 || from != 0 || before != 0
		hidden := q.AuthorID != 0 && q.ProjectID == 0 && len(q.HiddenProjects) > 0
		match := func(h []byte) bool {
			switch {
			case act != 0 && !actByIndex && h[24] != act:
				return false
			case tgt != 0 && h[25] != tgt:
				return false
			case from != 0 && hdrTime(h) < from:
				return false
			case before != 0 && hdrTime(h) >= before:
				return false
			case hidden && q.HiddenProjects[hdrProject(h)]:
				return false
			}
			return true
		}
		if scan {
			for _, c := range srcs {
				for c.start(); c.k != nil; c.advance() {
					if match(c.v[:evHdrLen]) {
						total++
					}
				}
			}
		} else {
			total = q.countTx(tx, act)
		}
		if q.Limit <= 0 || q.Offset >= total {
			return nil
		}
		it := newEventMerge(srcs, !q.Asc)
		skipped := 0
		events := tx.Bucket(bktEvents)
		for id, h, ok := it.next(); ok && len(out) < q.Limit; id, h, ok = it.next() {
			if !match(h) {
				continue
			}
			if skipped < q.Offset {
				skipped++
				continue
			}
			var e Event
			v := events.Get(itob(id))
			if v == nil {
				return fmt.Errorf("store: event %d is indexed but missing", id)
			}
			if err := decodeEvent(v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, total, err
}

// sources are the index ranges that hold the query's events; actByIndex
// says whether they hold only events of the action already.
func (q EventQuery) sources(tx kv.Tx, act byte) (srcs []*evCursor, actByIndex bool) {
	scoped := func(plain, byAct []byte, scope int64) *evCursor {
		if act != 0 {
			p := make([]byte, 9)
			binary.BigEndian.PutUint64(p, uint64(scope))
			p[8] = act
			return &evCursor{c: tx.Bucket(byAct).Cursor(), prefix: p, desc: !q.Asc}
		}
		return &evCursor{c: tx.Bucket(plain).Cursor(), prefix: itob(scope), desc: !q.Asc}
	}
	switch {
	case q.ProjectID != 0:
		return []*evCursor{scoped(bktEventsByProject, bktEventsByProjectAct, q.ProjectID)}, true
	case q.AuthorID != 0:
		return []*evCursor{scoped(bktEventsByAuthor, bktEventsByAuthorAct, q.AuthorID)}, true
	case q.Projects != nil:
		for _, p := range q.Projects {
			srcs = append(srcs, scoped(bktEventsByProject, bktEventsByProjectAct, p))
		}
		return srcs, true
	case q.All:
		return []*evCursor{{c: tx.Bucket(bktEvents).Cursor(), desc: !q.Asc}}, false
	}
	return nil, true
}

// countTx is the query's total from the counters (no target or date filter).
func (q EventQuery) countTx(tx kv.Tx, act byte) int {
	b := tx.Bucket(bktEventCounts)
	sum := func(prefix []byte, keep func(k []byte) bool) int {
		n := 0
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if (act == 0 || k[len(k)-1] == act) && (keep == nil || keep(k)) {
				n += int(binary.BigEndian.Uint64(v))
			}
		}
		return n
	}
	project := func(id int64) int { return sum(append([]byte{'p'}, itob(id)...), nil) }
	switch {
	case q.ProjectID != 0:
		return project(q.ProjectID)
	case q.AuthorID != 0:
		return sum(append([]byte{'a'}, itob(q.AuthorID)...), func(k []byte) bool {
			return !q.HiddenProjects[btoi(k[9:17])]
		})
	case q.Projects != nil:
		n := 0
		for _, p := range q.Projects {
			n += project(p)
		}
		return n
	case q.All:
		return sum([]byte{'g'}, nil)
	}
	return 0
}

// EventProjectIDs lists the projects that hold events: all of them when
// author is 0, else those where author has events.
func (s *Store) EventProjectIDs(author int64) ([]int64, error) {
	var out []int64
	err := s.db.View(func(tx kv.Tx) error {
		c := tx.Bucket(bktEventCounts).Cursor()
		prefix, at := []byte{'p'}, 1
		if author != 0 {
			prefix, at = append([]byte{'a'}, itob(author)...), 9
		}
		var last int64
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if id := btoi(k[at : at+8]); id != last {
				out = append(out, id)
				last = id
			}
		}
		return nil
	})
	return out, err
}
