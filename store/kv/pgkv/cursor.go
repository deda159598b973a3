package pgkv

import (
	"slices"

	"registryd/store/kv"
)

// Cursor pages: the first fetch is small (a Seek is often a prefix probe
// that reads a key or two), each further fetch in the walk doubles up to
// maxPage, so a long walk costs few round trips and a probe little I/O.
const (
	firstPage = 8
	maxPage   = 256
)

type row struct{ k, v []byte }

// cursor walks a bucket with pages of rows fetched by index range scans.
//
// rows is a window of consecutive keys of the bucket as of the moment it
// was fetched, in ascending order; atStart/atEnd say whether it reaches the
// bucket's first/last key. The window stays exact while the transaction
// writes nothing to the bucket (other transactions' writes are invisible to
// its snapshot). Any write to the bucket (gen changes) makes it stale: the
// cursor then fetches again relative to its current key, so reads see the
// transaction's own writes. The cursor's own Delete keeps the window exact
// by removing the row, so "seek, delete, next" loops cost no extra query.
type cursor struct {
	b    *bucket
	rows []row
	gen  uint64 // the bucket's write generation when rows was fetched
	lim  int    // size of the next fetch

	atStart, atEnd bool

	state int
	pos   int    // in rows: the current row (stAt), or where the deleted one was (stDeleted)
	key   []byte // current key (stAt, stDeleted)
}

const (
	stNone    = iota // not positioned
	stAt             // on key, rows[pos]
	stDeleted        // key was deleted by Delete; rows[pos] is the key after it
	stEnd            // ran off the end
	stStart          // ran off the start
)

var _ kv.Cursor = (*cursor)(nil)

func (c *cursor) fresh() bool { return c.rows != nil && c.gen == c.b.t.gen[c.b.id] }

func (c *cursor) nextLimit() int {
	if c.lim == 0 {
		c.lim = firstPage
	} else if c.lim < maxPage {
		c.lim *= 2
	}
	return c.lim
}

// fetchForward loads the keys from 'from' (inclusive, or after it) on.
func (c *cursor) fetchForward(from []byte, inclusive bool) {
	q := `SELECT k, v FROM kv WHERE b = $1 AND k > $2 ORDER BY k LIMIT $3`
	if inclusive {
		q = `SELECT k, v FROM kv WHERE b = $1 AND k >= $2 ORDER BY k LIMIT $3`
	}
	if from == nil {
		from = []byte{} // bytea '' sorts first; a nil would be NULL
	}
	lim := c.nextLimit()
	c.load(q, from, lim)
	c.atEnd = len(c.rows) < lim
	c.atStart = inclusive && len(from) == 0
	c.pos = 0
}

// fetchBackward loads the keys before 'before' (all when nil), last first.
func (c *cursor) fetchBackward(before []byte) {
	lim := c.nextLimit()
	if before == nil {
		c.load(`SELECT k, v FROM kv WHERE b = $1 ORDER BY k DESC LIMIT $2`, nil, lim)
	} else {
		c.load(`SELECT k, v FROM kv WHERE b = $1 AND k < $2 ORDER BY k DESC LIMIT $3`, before, lim)
	}
	slices.Reverse(c.rows)
	c.atStart = len(c.rows) < lim
	c.atEnd = before == nil
	c.pos = len(c.rows) - 1
}

func (c *cursor) load(q string, key []byte, lim int) {
	t := c.b.t
	c.rows = c.rows[:0:0]
	if !t.usable() {
		c.rows = nil
		return
	}
	ctx, cancel := t.ctx()
	defer cancel()
	args := []any{c.b.id, key, lim}
	if key == nil {
		args = []any{c.b.id, lim}
	}
	rows, err := t.pg.Query(ctx, q, args...)
	if err != nil {
		t.fail(err)
		c.rows = nil
		return
	}
	defer rows.Close()
	out := make([]row, 0, lim)
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.k, &r.v); err != nil {
			t.fail(err)
			c.rows = nil
			return
		}
		if r.v == nil {
			r.v = []byte{}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.fail(err)
		c.rows = nil
		return
	}
	c.rows = out
	c.gen = t.gen[c.b.id]
}

// settle turns the fetched window into the cursor's position.
func (c *cursor) settle(offState int) ([]byte, []byte) {
	if !c.b.t.usable() {
		c.rows = nil
		return nil, nil
	}
	if len(c.rows) == 0 {
		c.state, c.key = offState, nil
		return nil, nil
	}
	return c.at(c.pos)
}

func (c *cursor) at(i int) ([]byte, []byte) {
	c.state, c.pos, c.key = stAt, i, c.rows[i].k
	c.b.t.sawPresent(c.b.id, c.rows[i].k)
	return c.rows[i].k, c.rows[i].v
}

func (c *cursor) off(state int) ([]byte, []byte) {
	c.state, c.key = state, nil
	return nil, nil
}

func (c *cursor) First() ([]byte, []byte) {
	c.lim = 0
	c.fetchForward(nil, true)
	return c.settle(stEnd)
}

func (c *cursor) Last() ([]byte, []byte) {
	c.lim = 0
	c.fetchBackward(nil)
	return c.settle(stStart)
}

func (c *cursor) Seek(key []byte) ([]byte, []byte) {
	c.lim = 0
	c.fetchForward(key, true)
	return c.settle(stEnd)
}

func (c *cursor) Next() ([]byte, []byte) {
	if !c.b.t.usable() {
		return nil, nil
	}
	switch c.state {
	case stNone, stStart:
		return c.First()
	case stEnd:
		return nil, nil
	}
	if c.fresh() {
		i := c.pos + 1
		if c.state == stDeleted {
			i = c.pos
		}
		if i < len(c.rows) {
			return c.at(i)
		}
		if c.atEnd {
			return c.off(stEnd)
		}
	}
	c.fetchForward(c.key, false)
	return c.settle(stEnd)
}

func (c *cursor) Prev() ([]byte, []byte) {
	if !c.b.t.usable() {
		return nil, nil
	}
	switch c.state {
	case stNone, stEnd:
		return c.Last()
	case stStart:
		return nil, nil
	}
	if c.fresh() {
		if i := c.pos - 1; i >= 0 {
			return c.at(i)
		}
		if c.atStart {
			return c.off(stStart)
		}
	}
	c.fetchBackward(c.key)
	return c.settle(stStart)
}

// Delete removes the key at the cursor. The window stays exact: the row is
// removed from it, and Next/Prev continue from the gap.
func (c *cursor) Delete() error {
	t := c.b.t
	if err := t.writeErr(); err != nil {
		return err
	}
	if c.state != stAt {
		return nil // nothing under the cursor (bbolt would delete garbage)
	}
	wasFresh := c.fresh()
	if err := c.b.Delete(c.key); err != nil {
		return err
	}
	c.state = stDeleted
	if wasFresh {
		c.rows = slices.Delete(c.rows, c.pos, c.pos+1)
		c.gen = t.gen[c.b.id]
	}
	return nil
}
