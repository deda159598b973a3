package store

import (
	"encoding/binary"
	"fmt"

	"registryd/store/kv"
)

// How a project's list is stored (storedDepList.Layout).
const (
	// depLayoutJSON is the form before schema 2: bktDependencies holds one
	// JSON Dependency per position (project id + position), bktDepsByPM one
	// key per entry (project id + package manager + 0 + position -> nil).
	// It is still read; the next upload of the project rewrites it.
	depLayoutJSON = 0
	// depLayoutChunks: bktDependencies holds depsPerChunk entries per key
	// (project id + chunk number from 0), in the binary form of
	// depEncoder; bktDepsByPM holds runs of up to posPerIndexChunk
	// positions per key (project id + package manager + 0 + run number from
	// 0 -> uvarint deltas, the first from 0).
	depLayoutChunks = 2
	// depLayoutPackages is depLayoutChunks whose chunks also say each
	// entry's advisory package and where each vulnerability comes from
	// (depChunkTagPackages), with the entries indexed by package in
	// bktDepsByPkg (dependencies_index.go) so that an advisory import
	// finds them.
	depLayoutPackages = 3
)

const (
	// depsPerChunk entries share one key: a dense 50 MiB SBOM is 1,300 keys
	// instead of 83,000, so bbolt's per-key costs (a 64-byte inode in memory
	// while the transaction runs, a 16-byte page element and the key on
	// disk) almost vanish, and strings repeated inside a chunk (package
	// manager, lockfile path, licenses, versions) are written once. A page
	// of the API reads one or two chunks.
	depsPerChunk = 64
	// posPerIndexChunk positions of one package manager share one index key.
	posPerIndexChunk = 1024
	// depChunkTag starts every chunk of depLayoutChunks; a JSON record
	// starts with '{'.
	depChunkTag = 0x02
	// depChunkTagPackages starts every chunk of depLayoutPackages.
	depChunkTagPackages = 0x03
)

// Where a vulnerability of an entry comes from (DependencyVulnerability.Origin).
const (
	originSBOM     uint8 = 1 // the uploaded SBOM named it
	originAdvisory uint8 = 2 // an advisory of the database matches the entry
)

// storedDepList is the summary record of a list: the API's DependencyList
// and how the list is stored.
type storedDepList struct {
	DependencyList
	Layout int `json:"layout,omitempty"`
	// VulnRefs counts the entries each vulnerability affects, so that an
	// advisory import that changes a few entries keeps
	// DependencyList.Vulnerabilities exact.
	VulnRefs map[int64]int `json:"vuln_refs,omitempty"`
}

// depEncoder writes chunks of entries (depChunkTagPackages). An entry is
// its name (uvarint length + bytes) and then shared strings: version,
// package manager, file path, ecosystem; the package name (raw, empty when
// it is the entry's name); the number of licenses and per license SPDX id,
// name and URL, the number of vulnerabilities and per vulnerability its id
// (uvarint), name, severity and origin (one byte). A shared string is 0 +
// length + bytes the first time a chunk has it and afterwards its 1-based
// rank among the chunk's shared strings. Chunks of depChunkTag are the same
// without ecosystem, package and origin.
type depEncoder struct {
	buf  []byte
	strs map[string]uint64
	n    int // entries in buf
}

func newDepEncoder() *depEncoder {
	e := &depEncoder{strs: map[string]uint64{}}
	e.reset()
	return e
}

func (e *depEncoder) reset() {
	e.buf, e.n = append(e.buf[:0], depChunkTagPackages), 0
	clear(e.strs)
}

func (e *depEncoder) raw(s string) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *depEncoder) shared(s string) {
	if i, ok := e.strs[s]; ok {
		e.buf = binary.AppendUvarint(e.buf, i)
		return
	}
	e.strs[s] = uint64(len(e.strs) + 1)
	e.buf = append(e.buf, 0)
	e.raw(s)
}

func (e *depEncoder) add(d *Dependency) {
	e.raw(d.Name)
	e.shared(d.Version)
	e.shared(d.PackageManager)
	e.shared(d.FilePath)
	e.shared(d.Ecosystem)
	if d.Package == d.Name {
		e.raw("")
	} else {
		e.raw(d.Package) // "" too: the name
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(d.Licenses)))
	for _, l := range d.Licenses {
		e.shared(l.SPDX)
		e.shared(l.Name)
		e.shared(l.URL)
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(d.Vulnerabilities)))
	for _, v := range d.Vulnerabilities {
		e.buf = binary.AppendUvarint(e.buf, uint64(v.ID))
		e.shared(v.Name)
		e.shared(v.Severity)
		e.buf = append(e.buf, v.Origin)
	}
	e.n++
}

// arena hands out copies of values that bbolt must keep until the commit,
// carved from a few large slabs rather than one allocation each.
type arena struct{ slab []byte }

func (a *arena) copy(b []byte) []byte {
	if len(b) > cap(a.slab)-len(a.slab) {
		a.slab = make([]byte, 0, max(len(b), min(256<<10, 2*cap(a.slab)), 4<<10))
	}
	n := len(a.slab)
	a.slab = append(a.slab, b...)
	return a.slab[n:len(a.slab):len(a.slab)]
}

// depChunkReader reads entries of a chunked list at increasing positions,
// decoding each chunk at most once per pass. The strings it returns are
// copies: they outlive the transaction.
type depChunkReader struct {
	b       kv.Bucket
	project int64
	chunk   int64
	raw     []byte // the rest of the current chunk
	next    int    // index in the chunk of the entry raw starts with
	strs    []string
	tag     byte // of the current chunk
}

func (r *depChunkReader) corrupt() {
	panic(fmt.Sprintf("store: corrupt dependency chunk %d of project %d", r.chunk, r.project))
}

func (r *depChunkReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.raw)
	if n <= 0 {
		r.corrupt()
	}
	r.raw = r.raw[n:]
	return v
}

func (r *depChunkReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.raw)) {
		r.corrupt()
	}
	b := r.raw[:n]
	r.raw = r.raw[n:]
	return b
}

func (r *depChunkReader) shared() string {
	i := r.uvarint()
	if i == 0 {
		s := string(r.bytes())
		r.strs = append(r.strs, s)
		return s
	}
	if i > uint64(len(r.strs)) {
		r.corrupt()
	}
	return r.strs[i-1]
}

func (r *depChunkReader) byte1() byte {
	if len(r.raw) == 0 {
		r.corrupt()
	}
	b := r.raw[0]
	r.raw = r.raw[1:]
	return b
}

// entry decodes the next entry into d, or skips it when d is nil.
func (r *depChunkReader) entry(d *Dependency) {
	name := r.bytes()
	version, pm, path := r.shared(), r.shared(), r.shared()
	var eco string
	var pkg []byte
	if r.tag == depChunkTagPackages {
		eco, pkg = r.shared(), r.bytes()
	}
	var ls []License
	for n := r.uvarint(); n > 0; n-- {
		l := License{SPDX: r.shared(), Name: r.shared(), URL: r.shared()}
		if d != nil {
			ls = append(ls, l)
		}
	}
	var vs []DependencyVulnerability
	for n := r.uvarint(); n > 0; n-- {
		v := DependencyVulnerability{ID: int64(r.uvarint()), Name: r.shared(), Severity: r.shared(), Origin: originSBOM}
		if r.tag == depChunkTagPackages {
			v.Origin = r.byte1()
		}
		if d != nil {
			vs = append(vs, v)
		}
	}
	r.next++
	if d != nil {
		*d = Dependency{Name: string(name), Version: version, PackageManager: pm, FilePath: path,
			Ecosystem: eco, Package: string(pkg), Licenses: ls, Vulnerabilities: vs}
	}
}

// at returns the entry at pos (from 1); positions asked must not decrease
// for the reader to pass over each chunk once.
func (r *depChunkReader) at(pos int64) (Dependency, bool) {
	c, i := (pos-1)/depsPerChunk, int((pos-1)%depsPerChunk)
	if c != r.chunk || i < r.next || r.raw == nil {
		raw := r.b.Get(pair(r.project, c))
		if raw == nil {
			return Dependency{}, false
		}
		r.chunk = c
		if raw[0] != depChunkTag && raw[0] != depChunkTagPackages {
			r.corrupt()
		}
		r.raw, r.next, r.strs, r.tag = raw[1:], 0, r.strs[:0], raw[0]
	}
	for r.next < i {
		if len(r.raw) == 0 {
			return Dependency{}, false
		}
		r.entry(nil)
	}
	if len(r.raw) == 0 {
		return Dependency{}, false
	}
	var d Dependency
	r.entry(&d)
	return d, true
}
