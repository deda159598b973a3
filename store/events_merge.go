package store

import (
	"bytes"
	"container/heap"

	"registryd/store/kv"
)

// evCursor walks one key range (all keys with prefix) of an event bucket in
// id order; the event id is the last 8 bytes of each key and the header
// leads each value.
type evCursor struct {
	c      kv.Cursor
	prefix []byte
	desc   bool
	k, v   []byte
}

func (e *evCursor) start() {
	switch {
	case !e.desc:
		e.k, e.v = e.c.Seek(e.prefix)
	case len(e.prefix) == 0:
		e.k, e.v = e.c.Last()
	default:
		end := prefixEnd(e.prefix)
		if end == nil {
			e.k, e.v = e.c.Last()
		} else if e.k, e.v = e.c.Seek(end); e.k == nil {
			e.k, e.v = e.c.Last()
		} else {
			e.k, e.v = e.c.Prev()
		}
	}
	e.check()
}

func (e *evCursor) advance() {
	if e.desc {
		e.k, e.v = e.c.Prev()
	} else {
		e.k, e.v = e.c.Next()
	}
	e.check()
}

func (e *evCursor) check() {
	if e.k != nil && (!bytes.HasPrefix(e.k, e.prefix) || len(e.v) < evHdrLen) {
		e.k, e.v = nil, nil
	}
}

func (e *evCursor) id() int64 { return btoi(e.k[len(e.k)-8:]) }

// prefixEnd is the smallest key above every key with prefix p, or nil.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// eventMerge yields the entries of several ranges in one id order.
type eventMerge struct {
	one  *evCursor
	h    evHeap
	init bool
	srcs []*evCursor
}

func newEventMerge(srcs []*evCursor, desc bool) *eventMerge {
	m := &eventMerge{srcs: srcs}
	if len(srcs) == 1 {
		m.one = srcs[0]
	}
	m.h.desc = desc
	return m
}

func (m *eventMerge) next() (int64, []byte, bool) {
	if m.one != nil {
		if !m.init {
			m.one.start()
			m.init = true
		} else if m.one.k != nil {
			m.one.advance()
		}
		if m.one.k == nil {
			return 0, nil, false
		}
		return m.one.id(), m.one.v[:evHdrLen], true
	}
	if !m.init {
		m.init = true
		for _, c := range m.srcs {
			if c.start(); c.k != nil {
				m.h.cs = append(m.h.cs, c)
			}
		}
		heap.Init(&m.h)
	} else if len(m.h.cs) > 0 {
		// Advance the cursor whose entry was returned last.
		top := m.h.cs[0]
		if top.advance(); top.k == nil {
			heap.Pop(&m.h)
		} else {
			heap.Fix(&m.h, 0)
		}
	}
	if len(m.h.cs) == 0 {
		return 0, nil, false
	}
	top := m.h.cs[0]
	return top.id(), top.v[:evHdrLen], true
}

type evHeap struct {
	cs   []*evCursor
	desc bool
}

func (h *evHeap) Len() int { return len(h.cs) }
func (h *evHeap) Less(i, j int) bool {
	if h.desc {
		return h.cs[i].id() > h.cs[j].id()
	}
	return h.cs[i].id() < h.cs[j].id()
}
func (h *evHeap) Swap(i, j int) { h.cs[i], h.cs[j] = h.cs[j], h.cs[i] }
func (h *evHeap) Push(x any)    { h.cs = append(h.cs, x.(*evCursor)) }
func (h *evHeap) Pop() any {
	x := h.cs[len(h.cs)-1]
	h.cs = h.cs[:len(h.cs)-1]
	return x
}
