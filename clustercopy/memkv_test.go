package clustercopy

import (
	"bytes"
	"errors"
	"sort"
	"sync"

	"registryd/store/kv"
)

// memDB is an in-memory kv.DB for the tests: one writer at a time, a write
// transaction works on a copy that replaces the state on commit.
type memDB struct {
	mu      sync.RWMutex
	buckets map[string]*memBucket
	name    string
	// failAfter, when > 0, makes the Update after that many succeed fail
	// (a process killed between two batches).
	failAfter int
	updates   int
}

func newMemDB(name string) *memDB { return &memDB{buckets: map[string]*memBucket{}, name: name} }

var errKilled = errors.New("killed")

func (d *memDB) View(fn func(kv.Tx) error) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return fn(&memTx{db: d, buckets: d.buckets})
}

func (d *memDB) Update(fn func(kv.Tx) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failAfter > 0 && d.updates >= d.failAfter {
		return errKilled
	}
	work := map[string]*memBucket{}
	for n, b := range d.buckets {
		work[n] = b.clone()
	}
	if err := fn(&memTx{db: d, buckets: work, writable: true}); err != nil {
		return err
	}
	d.buckets = work
	d.updates++
	return nil
}

func (d *memDB) Close() error     { return nil }
func (d *memDB) Stats() kv.Stats  { return kv.Stats{} }
func (d *memDB) Describe() string { return d.name }

type memTx struct {
	db       *memDB
	buckets  map[string]*memBucket
	writable bool
}

func (t *memTx) Bucket(name []byte) kv.Bucket {
	if b, ok := t.buckets[string(name)]; ok {
		return &memBucketTx{b: b, writable: t.writable}
	}
	return nil
}

func (t *memTx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	if !t.writable {
		return nil, kv.ErrTxClosed
	}
	if _, ok := t.buckets[string(name)]; !ok {
		t.buckets[string(name)] = &memBucket{m: map[string][]byte{}}
	}
	return t.Bucket(name), nil
}

func (t *memTx) ForEach(fn func([]byte, kv.Bucket) error) error {
	names := make([]string, 0, len(t.buckets))
	for n := range t.buckets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := fn([]byte(n), t.Bucket([]byte(n))); err != nil {
			return err
		}
	}
	return nil
}

func (t *memTx) Writable() bool { return t.writable }

type memBucket struct {
	m   map[string][]byte
	seq uint64
}

func (b *memBucket) clone() *memBucket {
	c := &memBucket{m: make(map[string][]byte, len(b.m)), seq: b.seq}
	for k, v := range b.m {
		c.m[k] = v
	}
	return c
}

func (b *memBucket) keys() []string {
	ks := make([]string, 0, len(b.m))
	for k := range b.m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

type memBucketTx struct {
	b        *memBucket
	writable bool
}

func (b *memBucketTx) Get(k []byte) []byte { return b.b.m[string(k)] }
func (b *memBucketTx) Put(k, v []byte) error {
	if !b.writable {
		return kv.ErrTxClosed
	}
	b.b.m[string(k)] = bytes.Clone(v)
	return nil
}
func (b *memBucketTx) Delete(k []byte) error {
	if !b.writable {
		return kv.ErrTxClosed
	}
	delete(b.b.m, string(k))
	return nil
}
func (b *memBucketTx) Cursor() kv.Cursor { return &memCursor{b: b, keys: b.b.keys(), i: -1} }
func (b *memBucketTx) ForEach(fn func(k, v []byte) error) error {
	for _, k := range b.b.keys() {
		if err := fn([]byte(k), b.b.m[k]); err != nil {
			return err
		}
	}
	return nil
}
func (b *memBucketTx) NextSequence() (uint64, error) { b.b.seq++; return b.b.seq, nil }
func (b *memBucketTx) Sequence() uint64              { return b.b.seq }
func (b *memBucketTx) SetSequence(v uint64) error    { b.b.seq = v; return nil }
func (b *memBucketTx) KeyN() int                     { return len(b.b.m) }

type memCursor struct {
	b    *memBucketTx
	keys []string
	i    int
}

func (c *memCursor) at() ([]byte, []byte) {
	if c.i < 0 || c.i >= len(c.keys) {
		return nil, nil
	}
	return []byte(c.keys[c.i]), c.b.b.m[c.keys[c.i]]
}
func (c *memCursor) First() ([]byte, []byte) { c.i = 0; return c.at() }
func (c *memCursor) Last() ([]byte, []byte)  { c.i = len(c.keys) - 1; return c.at() }
func (c *memCursor) Seek(k []byte) ([]byte, []byte) {
	c.i = sort.SearchStrings(c.keys, string(k))
	return c.at()
}
func (c *memCursor) Next() ([]byte, []byte) { c.i++; return c.at() }
func (c *memCursor) Prev() ([]byte, []byte) { c.i--; return c.at() }
func (c *memCursor) Delete() error {
	k, _ := c.at()
	return c.b.Delete(k)
}
