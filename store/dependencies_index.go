package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"registryd/store/kv"
)

// depPMKey is project id + package manager + 0 + n (a position in
// depLayoutJSON, a run number in depLayoutChunks).
func depPMKey(project int64, pm string, n int64) []byte {
	k := make([]byte, 0, 17+len(pm))
	k = append(k, itob(project)...)
	k = append(k, pm...)
	k = append(k, 0)
	return append(k, itob(n)...)
}

func depPMPrefix(project int64, pm string) []byte {
	k := make([]byte, 0, 9+len(pm))
	k = append(append(k, itob(project)...), pm...)
	return append(k, 0)
}

// pmPositions walks the positions of one package manager in increasing
// order; pos is 0 once they are all seen.
type pmPositions struct {
	c       kv.Cursor
	prefix  []byte
	chunked bool
	rest    []byte // chunked: the positions of the current key not yet read
	pos     int64
}

func (p *pmPositions) load(k, v []byte) {
	for ; k != nil && bytes.HasPrefix(k, p.prefix); k, v = p.c.Next() {
		if !p.chunked {
			p.pos = btoi(k[len(k)-8:])
			return
		}
		if p.rest, p.pos = v, 0; p.step() {
			return
		}
	}
	p.pos = 0
}

func (p *pmPositions) step() bool {
	if len(p.rest) == 0 {
		return false
	}
	d, n := binary.Uvarint(p.rest)
	if n <= 0 {
		panic(fmt.Sprintf("store: corrupt dependency index under %x", p.prefix))
	}
	p.rest, p.pos = p.rest[n:], p.pos+int64(d)
	return true
}

func (p *pmPositions) next() {
	if p.chunked && p.step() {
		return
	}
	p.load(p.c.Next())
}

// pmRun collects the positions of one package manager into index keys.
type pmRun struct {
	seq, last int64
	n         int
	buf       []byte
}

func vulnKey(project int64, external string) []byte {
	return append(itob(project), external...)
}

// deletePrefix removes every key of b that starts with prefix.
func deletePrefix(b kv.Bucket, prefix []byte) error {
	return deleteWhere(b, prefix, prefix, nil)
}

// deleteWhere removes the keys of b from seek on that start with prefix and
// for which drop (nil: all) says so.
func deleteWhere(b kv.Bucket, seek, prefix []byte, drop func(k []byte) bool) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(seek); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if drop == nil || drop(k) {
			keys = append(keys, bytes.Clone(k))
		}
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
