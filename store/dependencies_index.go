package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

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

// The package index (bktDepsByPkg) of lists of depLayoutPackages: which
// projects use a package, and at which positions, so that an advisory
// import re-matches exactly those entries. Its keys are per project:
//
//   - a list of at most maxExactPackages distinct packages has one key per
//     package: 'E' + ecosystem + 0 + name + 0 + project id;
//   - a larger list has one key per hash bucket of its packages: 'B' +
//     bucket (2 bytes, the top pkgBucketBits bits of the package's hash) +
//     project id.
//
// Either way an upload writes at most maxExactPackages keys (as many as a
// list of 64,000 entries has chunks), and an import finds the users of a
// package with two seeks: the exact keys of the package, and the bucket
// keys of its bucket, which every large list that has a package of that
// bucket holds. The value is a sequence of records: the package's hash (8
// bytes), the number of its positions and their uvarint deltas (the first
// from 0). 'M' + project id is the list's manifest: the keys it wrote
// (uvarint length + key each), so that the next upload deletes those it
// does not write again without reading the old list.
const (
	maxExactPackages = 1024
	pkgBucketBits    = 10
	pkgExactTag      = 'E'
	pkgBucketTag     = 'B'
	pkgManifestTag   = 'M'
)

// pkgKey is ecosystem + 0 + name: how advisories and the index name a
// package.
func pkgKey(eco, name string) []byte {
	k := make([]byte, 0, len(eco)+1+len(name))
	k = append(append(k, eco...), 0)
	return append(k, name...)
}

// matchable reports whether a package can be matched: an ecosystem, and a
// key short enough and without NUL bytes.
func matchable(eco, name string) bool {
	return eco != "" && name != "" && len(eco)+1+len(name) <= MaxPackageKey &&
		strings.IndexByte(eco, 0) < 0 && strings.IndexByte(name, 0) < 0
}

// FNV-1a 64, written out so that hashing an entry's package allocates
// nothing.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// pkgHash is FNV-1a 64 of a package key.
func pkgHash(pk []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range pk {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// pkgHashOf is pkgHash(pkgKey(eco, name)).
func pkgHashOf(eco, name string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(eco); i++ {
		h = (h ^ uint64(eco[i])) * fnvPrime
	}
	h *= fnvPrime // ^ 0
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * fnvPrime
	}
	return h
}

func pkgManifestKey(project int64) []byte { return append([]byte{pkgManifestTag}, itob(project)...) }

// manifestKeys splits a manifest value.
func manifestKeys(v []byte) [][]byte {
	var out [][]byte
	for len(v) > 0 {
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n {
			panic(fmt.Sprintf("store: corrupt package index manifest %x", v))
		}
		out = append(out, v[k:k+int(n)])
		v = v[k+int(n):]
	}
	return out
}

func pkgBucket(h uint64) uint16 { return uint16(h >> (64 - pkgBucketBits)) }

// pkgExactPrefix is the start of the exact keys of a package.
func pkgExactPrefix(pk []byte) []byte {
	k := make([]byte, 0, 2+len(pk))
	k = append(append(append(k, pkgExactTag), pk...), 0)
	return k
}

func pkgBucketPrefix(b uint16) []byte {
	return []byte{pkgBucketTag, byte(b >> 8), byte(b)}
}

// appendPkgPositions adds a record to an index value.
func appendPkgPositions(v []byte, h uint64, positions []int64) []byte {
	v = binary.BigEndian.AppendUint64(v, h)
	v = binary.AppendUvarint(v, uint64(len(positions)))
	last := int64(0)
	for _, p := range positions {
		v = binary.AppendUvarint(v, uint64(p-last))
		last = p
	}
	return v
}

// pkgPositions returns the positions of hash h in an index value.
func pkgPositions(v []byte, h uint64) []int64 {
	for len(v) >= 8 {
		rh := binary.BigEndian.Uint64(v)
		v = v[8:]
		n, k := binary.Uvarint(v)
		if k <= 0 {
			panic(fmt.Sprintf("store: corrupt package index value %x", v))
		}
		v = v[k:]
		var out []int64
		last := int64(0)
		for ; n > 0; n-- {
			d, k := binary.Uvarint(v)
			if k <= 0 {
				panic(fmt.Sprintf("store: corrupt package index value %x", v))
			}
			v = v[k:]
			last += int64(d)
			if rh == h {
				out = append(out, last)
			}
		}
		if rh == h {
			return out
		}
	}
	return nil
}

// pkgEnt is one matchable entry of a list, for its package index: 16
// bytes an entry, sorted by package hash when the list is written.
type pkgEnt struct {
	hash uint64
	pos  int64
}

// pkgIndexWriter collects a list's matchable entries and writes its index
// keys.
type pkgIndexWriter struct {
	ents []pkgEnt
}

func (w *pkgIndexWriter) add(d *Dependency, pos int64, n int) {
	if name := packageName(d); matchable(d.Ecosystem, name) {
		if w.ents == nil {
			w.ents = make([]pkgEnt, 0, n) // the list's size: no growth, no slack
		}
		w.ents = append(w.ents, pkgEnt{hash: pkgHashOf(d.Ecosystem, name), pos: pos})
	}
}

// groups sorts the entries and calls fn with the positions of each hash.
// Packages whose hashes collide share one group; the re-match checks each
// entry's package.
func (w *pkgIndexWriter) groups(fn func(h uint64, positions []int64) error) error {
	slices.SortFunc(w.ents, func(a, b pkgEnt) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	var ps []int64
	for i := 0; i < len(w.ents); {
		j := i
		ps = ps[:0]
		for ; j < len(w.ents) && w.ents[j].hash == w.ents[i].hash; j++ {
			ps = append(ps, w.ents[j].pos)
		}
		if err := fn(w.ents[i].hash, ps); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// buckets says whether the list is indexed by bucket: more distinct
// packages than maxExactPackages. Call after groups has sorted.
func (w *pkgIndexWriter) buckets() bool {
	n := 0
	for i := range w.ents {
		if i == 0 || w.ents[i].hash != w.ents[i-1].hash {
			n++
		}
	}
	return n > maxExactPackages
}

// write puts the list's index keys and its manifest and returns the keys
// (as strings, at most maxExactPackages), so that the old list's other
// keys can be deleted. pkgAt gives the package of a position.
func (w *pkgIndexWriter) write(b kv.Bucket, project int64, mem *arena, pkgAt func(pos int64) []byte) (map[string]bool, error) {
	keys, err := w.writeKeys(b, project, mem, pkgAt)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return keys, b.Delete(pkgManifestKey(project))
	}
	var m []byte
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		m = binary.AppendUvarint(m, uint64(len(k)))
		m = append(m, k...)
	}
	return keys, b.Put(pkgManifestKey(project), mem.copy(m))
}

func (w *pkgIndexWriter) writeKeys(b kv.Bucket, project int64, mem *arena, pkgAt func(pos int64) []byte) (map[string]bool, error) {
	_ = w.groups(func(uint64, []int64) error { return nil }) // sort
	buckets := w.buckets()
	keys := map[string]bool{}
	var v []byte
	var curBucket = -1
	flush := func() error {
		if curBucket < 0 {
			return nil
		}
		k := append(pkgBucketPrefix(uint16(curBucket)), itob(project)...)
		keys[string(k)] = true
		return b.Put(k, mem.copy(v))
	}
	err := w.groups(func(h uint64, positions []int64) error {
		if buckets {
			if bk := int(pkgBucket(h)); bk != curBucket {
				if err := flush(); err != nil {
					return err
				}
				curBucket, v = bk, v[:0]
			}
			v = appendPkgPositions(v, h, positions)
			return nil
		}
		rec := mem.copy(appendPkgPositions(v[:0], h, positions))
		// Each distinct package of the group (almost always one) gets a key.
		var done [][]byte
		for _, pos := range positions {
			pk := pkgAt(pos)
			if slices.ContainsFunc(done, func(x []byte) bool { return bytes.Equal(x, pk) }) {
				continue
			}
			done = append(done, pk)
			k := append(pkgExactPrefix(pk), itob(project)...)
			keys[string(k)] = true
			if err := b.Put(k, rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && buckets {
		err = flush()
	}
	return keys, err
}
