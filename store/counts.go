package store

import (
	"bytes"
	"math/rand/v2"
	"slices"

	"registryd/store/kv"
)

// Key counts. The metrics (CacheStats, read at every scrape) and the API's
// totals (ListUsers, AdvisoryStatus) want the number of keys of a few
// buckets. kv's KeyN walks every key (bbolt's page statistics, PostgreSQL's
// count(*)), so store keeps the counts instead, in bucket counts, in the
// same transactions that add and remove the keys: a count is read in O(1)
// and is exactly the number of keys of the same snapshot.
//
// The counting is not left to the write paths. Every write transaction of
// the store runs through keyCountDB, whose transaction hands out the
// counted buckets wrapped: a Put of a key the bucket did not have adds one,
// a Delete of a key it had takes one away, whoever calls them (group
// commit's batches, the collector, imports, code not written yet). Whether
// the key was there is known from the transaction's own reads when it read
// that key just before, as the write paths do (a few recent keys per
// bucket are remembered), and read otherwise. The deltas are added to the
// counts when the transaction's function returns nil, inside the
// transaction: a transaction that fails counts nothing, one the engine runs
// again counts its last run, a batch counts once. Net deltas of zero (an
// entry replaced, a revalidation, a download count) write nothing.
//
// On an engine whose write transactions run concurrently (one that
// implements kv.Cluster: PostgreSQL), each count is split in shards summed
// when read: a write transaction adds its deltas to one shard drawn at
// random, so that two concurrent transactions that both add an entry
// seldom rewrite the same row, which PostgreSQL's serializable isolation
// resolves by aborting one of them. With one row, 64 concurrent fills
// each in a transaction of its own committed about 230 a second against
// 370 without counts (BenchmarkGroupCommit/index, group commit off); with
// 32 shards, 380 (on the 2-core development machine). A shard may go negative (an entry added on one shard is
// removed on another); only the sum is a count.
//
// A database written before the counts (schema version below 7) gets them
// on open: setUpSchema counts every counted bucket once (countKeysTx), in
// the transaction that moves the version forward.

// countedBuckets are the buckets whose keys are counted; a count's index is
// its bucket's position here.
var countedBuckets = [...][]byte{bktCacheEntries, bktCachePending, bktBlobRefs, bktAdvisories, bktAdvisoryPkgs, bktUsers}

// Indexes of countedBuckets.
const (
	countEntries = iota
	countPending
	countBlobRefs
	countAdvisories
	countAdvisoryPkgs
	countUsers
	numCounted
)

// countShards is the number of shards of a count on an engine that
// implements kv.Cluster; an engine of one process (bbolt: one writer at a
// time) uses shard 0 alone.
const countShards = 32

// knownMax bounds the keys a transaction remembers the presence of, per
// counted bucket: past it the memory starts over (a bulk write reads again
// instead of growing the map).
const knownMax = 1024

func countedIndex(name []byte) int {
	for i, b := range countedBuckets {
		if bytes.Equal(name, b) {
			return i
		}
	}
	return -1
}

// countKey is the key of one shard of a bucket's count.
func countKey(name []byte, shard int) []byte {
	return append(append(slices.Clip(name), 0), byte(shard))
}

// keyCounts reads every count as of tx: one walk of bucket counts, whose
// size does not depend on the data.
func keyCounts(tx kv.Tx) [numCounted]int64 {
	var out [numCounted]int64
	_ = tx.Bucket(bktCounts).ForEach(func(k, v []byte) error {
		if len(k) >= 2 && k[len(k)-2] == 0 && len(v) == 8 {
			if i := countedIndex(k[:len(k)-2]); i >= 0 {
				out[i] += btoi(v)
			}
		}
		return nil
	})
	return out
}

// countsKept reports whether every counted bucket has its count: shard 0
// is written for each by countKeysTx.
func countsKept(tx kv.Tx) bool {
	counts := tx.Bucket(bktCounts)
	for _, name := range countedBuckets {
		if counts.Get(countKey(name, 0)) == nil {
			return false
		}
	}
	return true
}

// countKeysTx sets every count to its bucket's number of keys, counted
// (KeyN, O(n)), and drops every other shard: once, for a database whose
// writers did not keep the counts. tx must not be a keyCountTx's.
func countKeysTx(tx kv.Tx) error {
	counts := tx.Bucket(bktCounts)
	var old [][]byte
	c := counts.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		old = append(old, slices.Clone(k))
	}
	for _, k := range old {
		if err := counts.Delete(k); err != nil {
			return err
		}
	}
	for _, name := range countedBuckets {
		if err := counts.Put(countKey(name, 0), itob(int64(tx.Bucket(name).KeyN()))); err != nil {
			return err
		}
	}
	return nil
}

// keyCountDB is the engine as the store writes to it: Update counts the
// keys of the counted buckets. View and the rest are the engine's.
type keyCountDB struct {
	kv.DB
	// shards is 1, or countShards on an engine that implements kv.Cluster.
	shards int
}

func newKeyCountDB(engine kv.DB) *keyCountDB {
	d := &keyCountDB{DB: engine, shards: 1}
	if _, shared := engine.(kv.Cluster); shared {
		d.shards = countShards
	}
	return d
}

// Update runs fn in a write transaction whose counted buckets count, and
// adds the counts' deltas before the commit. Each run of fn (an engine may
// run it again) starts from no delta.
func (d *keyCountDB) Update(fn func(kv.Tx) error) error {
	return d.DB.Update(func(tx kv.Tx) error {
		ct := &keyCountTx{Tx: tx}
		if err := fn(ct); err != nil {
			return err
		}
		shard := 0
		if d.shards > 1 {
			shard = rand.IntN(d.shards)
		}
		return ct.addCounts(shard)
	})
}

// keyCountTx is a write transaction that counts what is added to and
// removed from the counted buckets.
type keyCountTx struct {
	kv.Tx
	delta   [numCounted]int64
	known   [numCounted]map[string]bool // key -> present, for recent keys
	buckets [numCounted]*countedBucket
}

func (t *keyCountTx) wrap(name []byte, b kv.Bucket) kv.Bucket {
	i := countedIndex(name)
	if b == nil || i < 0 {
		return b
	}
	if t.buckets[i] == nil {
		t.buckets[i] = &countedBucket{Bucket: b, t: t, i: i}
	}
	return t.buckets[i]
}

func (t *keyCountTx) Bucket(name []byte) kv.Bucket {
	b := t.Tx.Bucket(name)
	if b == nil {
		return nil // an untyped nil
	}
	return t.wrap(name, b)
}

func (t *keyCountTx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	b, err := t.Tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return t.wrap(name, b), nil
}

func (t *keyCountTx) ForEach(fn func(name []byte, b kv.Bucket) error) error {
	return t.Tx.ForEach(func(name []byte, b kv.Bucket) error { return fn(name, t.wrap(name, b)) })
}

// remember records whether key is in counted bucket i now.
func (t *keyCountTx) remember(i int, key []byte, present bool) {
	m := t.known[i]
	if m == nil {
		m = map[string]bool{}
		t.known[i] = m
	} else if len(m) >= knownMax {
		clear(m)
	}
	m[string(key)] = present
}

// addCounts adds the deltas to the counts' shard.
func (t *keyCountTx) addCounts(shard int) error {
	var counts kv.Bucket
	for i, d := range t.delta {
		if d == 0 {
			continue
		}
		if counts == nil {
			counts = t.Tx.Bucket(bktCounts)
		}
		k := countKey(countedBuckets[i], shard)
		var n int64
		if v := counts.Get(k); v != nil {
			n = btoi(v)
		}
		if err := counts.Put(k, itob(n+d)); err != nil {
			return err
		}
	}
	return nil
}

// countedBucket is a counted bucket in a keyCountTx.
type countedBucket struct {
	kv.Bucket
	t *keyCountTx
	i int
}

func (b *countedBucket) Get(key []byte) []byte {
	v := b.Bucket.Get(key)
	b.t.remember(b.i, key, v != nil)
	return v
}

// has reports whether key is in the bucket: remembered, or read.
func (b *countedBucket) has(key []byte) bool {
	if present, ok := b.t.known[b.i][string(key)]; ok {
		return present
	}
	return b.Get(key) != nil
}

// wrote records a write of key that succeeded (err nil) and left the key
// present or not; a failed write counts nothing and is forgotten.
func (b *countedBucket) wrote(key []byte, had, present bool, err error) error {
	if err != nil {
		delete(b.t.known[b.i], string(key))
		return err
	}
	switch {
	case present && !had:
		b.t.delta[b.i]++
	case had && !present:
		b.t.delta[b.i]--
	}
	b.t.remember(b.i, key, present)
	return nil
}

func (b *countedBucket) Put(key, value []byte) error {
	had := b.has(key)
	return b.wrote(key, had, true, b.Bucket.Put(key, value))
}

func (b *countedBucket) Delete(key []byte) error {
	had := b.has(key)
	return b.wrote(key, had, false, b.Bucket.Delete(key))
}

func (b *countedBucket) Cursor() kv.Cursor { return &countedCursor{Cursor: b.Bucket.Cursor(), b: b} }

// countedCursor counts its Deletes: it knows the key it is at.
type countedCursor struct {
	kv.Cursor
	b   *countedBucket
	cur []byte // the key at the cursor, nil when none (or deleted)
}

func (c *countedCursor) at(k, v []byte) ([]byte, []byte) {
	c.cur = k
	return k, v
}

func (c *countedCursor) First() ([]byte, []byte)          { return c.at(c.Cursor.First()) }
func (c *countedCursor) Last() ([]byte, []byte)           { return c.at(c.Cursor.Last()) }
func (c *countedCursor) Seek(key []byte) ([]byte, []byte) { return c.at(c.Cursor.Seek(key)) }
func (c *countedCursor) Next() ([]byte, []byte)           { return c.at(c.Cursor.Next()) }
func (c *countedCursor) Prev() ([]byte, []byte)           { return c.at(c.Cursor.Prev()) }

func (c *countedCursor) Delete() error {
	if c.cur == nil {
		return c.Cursor.Delete() // no key under the cursor: nothing to count
	}
	key := slices.Clone(c.cur)
	had := c.b.has(key)
	err := c.Cursor.Delete()
	if err == nil {
		c.cur = nil // a second Delete removes nothing
	}
	return c.b.wrote(key, had, false, err)
}
