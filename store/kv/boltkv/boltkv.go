// Package boltkv is the embedded engine of package kv: one bbolt file, one
// writer at a time, read transactions on a consistent snapshot. It is a thin
// adapter: store's code was written against bbolt and kv is the subset of
// bbolt it uses, so every call maps to one bbolt call.
//
// The adapters for transactions, buckets and cursors are structs holding a
// single pointer: converting one to its kv interface stores the pointer in
// the interface word and does not allocate, so a read path that allocated
// nothing on bbolt allocates nothing through kv.
//
// bbolt's page fill hint is this engine's own business, not the contract's:
// the buckets named in Options.AppendMostly are filled to 95% in every write
// transaction that opens them.
package boltkv

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"registryd/store/kv"
)

// ErrLocked means another process holds the file lock of the database
// (bbolt's timeout on flock).
var ErrLocked = errors.New("the database file is locked by another process")

// ErrNilValue is returned by Put for a nil value: kv refuses it on every
// engine (bbolt would store it as an empty value, but a nil value read back
// from a bbolt cursor means a nested bucket). Store an empty, non-nil slice.
var ErrNilValue = errors.New("kv: nil value (use an empty slice)")

// Options configure Open.
type Options struct {
	// Timeout is how long Open waits for another process's lock on the
	// file before failing with ErrLocked. 0 waits indefinitely (bbolt's
	// rule).
	Timeout time.Duration
	// AppendMostly names the buckets whose keys mostly arrive in ascending
	// order (ids, times): every write transaction that opens one sets its
	// bbolt FillPercent to 0.95, so that appending fills the last page
	// instead of splitting it in half and leaving every page half empty
	// (bbolt also merges such a bucket's pages that deletes left under
	// 47.5% full, instead of 25%). Default none: every bucket keeps bbolt's
	// 0.5, right for keys that arrive in any order.
	AppendMostly [][]byte
}

// appendFillPercent is the FillPercent of Options.AppendMostly's buckets:
// pages nearly full, with a little room for the occasional key that lands
// between two others.
const appendFillPercent = 0.95

// initialMmapSize is how much of the address space bbolt maps for the file
// from the start: 1 GiB on 64-bit platforms. It is address space, not
// memory: only the pages of the file that are read become resident (and
// they are the page cache's, reclaimable), and the file itself still grows
// in small steps. Without it bbolt maps 32 KiB and doubles the mapping each
// time the file outgrows it; every remap inside a write transaction first
// copies every key and value of every node the transaction has touched onto
// the heap (node.dereference), so the first large SBOM upload into a fresh
// database allocated 554 MB for 50 MiB, and a remap also waits for every read
// transaction to end. Up to 1 GiB of data there is no remap at all; past it
// bbolt grows the mapping 1 GiB at a time. 32-bit platforms keep bbolt's
// default, their address space being scarce.
//
// Evaluated and not set: NoSync and NoGrowSync (they give up crash
// safety). FreelistMapType keeps allocation fast when the freelist is large.
const initialMmapSize = (1 << 30) * (strconv.IntSize / 64)

// The freelist is not written by each commit (NoFreelistSync, as etcd
// runs bbolt) but once, by Close. Written by every commit, it needs a fresh
// run of contiguous pages each time (the previous copy is freed by that same
// commit and pinned by any read transaction still open), so under sustained
// churn with constant readers the allocation found no run of that length,
// the file grew to make one, the new pages joined the freelist, the freelist
// grew, and so did the run it needed next: the soak's index went from 51 MB
// to 135 MB in twelve minutes with 30 MB of data, the rest free but
// fragmented. Unwritten, the freelist is rebuilt by Open from the pages the
// tree reaches; Close writes it, so a clean restart reads it back at once
// and only the start after a crash walks the file (2.5 s for 300,000
// entries in the page cache, much longer from a cold disk;
// docs/operations.md).

// DB is an open bbolt file. It implements kv.DB (not kv.Cluster: one
// process owns the file).
type DB struct {
	db *bolt.DB
	// appendMostly is Options.AppendMostly (nil when empty).
	appendMostly map[string]bool
}

var _ kv.DB = (*DB)(nil)

// Open opens (creating when needed, mode 0600) the bbolt file at path.
// Errors name the path; a lock held by another process wraps ErrLocked.
func Open(path string, o Options) (*DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.Timeout, FreelistType: bolt.FreelistMapType,
		NoFreelistSync: true, InitialMmapSize: initialMmapSize})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	d := &DB{db: db}
	for _, name := range o.AppendMostly {
		if d.appendMostly == nil {
			d.appendMostly = map[string]bool{}
		}
		d.appendMostly[string(name)] = true
	}
	return d, nil
}

// View runs fn in a read transaction.
func (d *DB) View(fn func(kv.Tx) error) error {
	return d.db.View(func(tx *bolt.Tx) error { return fn(Tx{tx}) })
}

// Update runs fn in a write transaction and commits when it returns nil.
// bbolt never retries: fn runs once. With Options.AppendMostly the
// transaction is a fillTx (two words: its conversion to kv.Tx allocates
// once per write transaction, never per read).
func (d *DB) Update(fn func(kv.Tx) error) error {
	if d.appendMostly == nil {
		return d.db.Update(func(tx *bolt.Tx) error { return fn(Tx{tx}) })
	}
	return d.db.Update(func(tx *bolt.Tx) error { return fn(fillTx{Tx{tx}, d.appendMostly}) })
}

// Close writes the freelist in one last commit, so the next Open reads it
// rather than walking the file, and closes the file. The file is closed
// even when that commit fails (a full disk): the next Open walks the file.
func (d *DB) Close() error {
	err := d.db.Update(func(*bolt.Tx) error {
		// Read by Commit only, under the writer lock this closure holds.
		d.db.NoFreelistSync = false
		return nil
	})
	if cerr := d.db.Close(); cerr != nil {
		return cerr
	}
	if err != nil && !errors.Is(err, bolt.ErrDatabaseNotOpen) { // closed already: nothing to write
		return fmt.Errorf("write the freelist of %s: %w", d.db.Path(), err)
	}
	return nil
}

// Describe is the file path.
func (d *DB) Describe() string { return d.db.Path() }

// Stats reads the file size (as of a fresh read transaction), the number
// of open read transactions and the free and pending pages of the freelist.
func (d *DB) Stats() kv.Stats {
	st := d.db.Stats()
	var size int64
	_ = d.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	page := int64(d.db.Info().PageSize)
	return kv.Stats{Bytes: size, OpenTx: st.OpenTxN,
		FreeBytes: int64(st.FreePageN) * page, PendingBytes: int64(st.PendingPageN) * page}
}

// CopyFile writes a consistent copy of the database, as of a read
// transaction, to path (mode 0600): bbolt's hot backup, for tests that
// simulate a crash between two commits.
func (d *DB) CopyFile(path string) error {
	return d.db.View(func(tx *bolt.Tx) error { return tx.CopyFile(path, 0o600) })
}

// Tx adapts *bolt.Tx.
type Tx struct{ tx *bolt.Tx }

var _ kv.Tx = Tx{}

// Bucket returns the named bucket, or a nil kv.Bucket.
func (t Tx) Bucket(name []byte) kv.Bucket {
	b := t.tx.Bucket(name)
	if b == nil {
		return nil
	}
	return Bucket{b}
}

// CreateBucketIfNotExists creates the bucket in a write transaction.
func (t Tx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	b, err := t.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return Bucket{b}, nil
}

// ForEach calls fn for every top-level bucket in name order.
func (t Tx) ForEach(fn func(name []byte, b kv.Bucket) error) error {
	return t.tx.ForEach(func(name []byte, b *bolt.Bucket) error { return fn(name, Bucket{b}) })
}

// Writable reports whether t is a write transaction.
func (t Tx) Writable() bool { return t.tx.Writable() }

// fillTx is a write transaction that sets the fill percent of the
// append-mostly buckets it opens. bbolt hands out one *bolt.Bucket per name
// within a write transaction, so the setting holds for the whole
// transaction; it is read when the transaction's pages are split, at
// commit.
type fillTx struct {
	Tx
	appendMostly map[string]bool
}

var _ kv.Tx = fillTx{}

func (t fillTx) fill(name []byte, b kv.Bucket) kv.Bucket {
	if b != nil && t.appendMostly[string(name)] {
		b.(Bucket).b.FillPercent = appendFillPercent
	}
	return b
}

func (t fillTx) Bucket(name []byte) kv.Bucket { return t.fill(name, t.Tx.Bucket(name)) }

func (t fillTx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	b, err := t.Tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return t.fill(name, b), nil
}

func (t fillTx) ForEach(fn func(name []byte, b kv.Bucket) error) error {
	return t.Tx.ForEach(func(name []byte, b kv.Bucket) error { return fn(name, t.fill(name, b)) })
}

// Bucket adapts *bolt.Bucket.
type Bucket struct{ b *bolt.Bucket }

var _ kv.Bucket = Bucket{}

func (b Bucket) Get(key []byte) []byte { return b.b.Get(key) }

// Put refuses a nil value (ErrNilValue); bbolt checks the rest.
func (b Bucket) Put(key, value []byte) error {
	if value == nil {
		return ErrNilValue
	}
	return txErr(b.b.Put(key, value))
}

func (b Bucket) Delete(key []byte) error                  { return txErr(b.b.Delete(key)) }
func (b Bucket) Cursor() kv.Cursor                        { return &Cursor{c: b.b.Cursor()} }
func (b Bucket) ForEach(fn func(k, v []byte) error) error { return b.b.ForEach(fn) }
func (b Bucket) Sequence() uint64                         { return b.b.Sequence() }
func (b Bucket) SetSequence(v uint64) error               { return txErr(b.b.SetSequence(v)) }

func (b Bucket) NextSequence() (uint64, error) {
	n, err := b.b.NextSequence()
	return n, txErr(err)
}

// KeyN counts the keys: O(n) (see kv.Bucket). bbolt's page statistics
// (what a read transaction uses) walk every page of the bucket, and leave
// out a write transaction's own changes, so a write transaction counts with
// a cursor.
func (b Bucket) KeyN() int {
	if !b.b.Tx().Writable() {
		return b.b.Stats().KeyN
	}
	n := 0
	c := b.b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

// Cursor adapts *bolt.Cursor. After a Delete, bbolt's own cursor can skip
// the key that follows when the page was changed earlier in the
// transaction; the adapter instead seeks to the deleted key, which lands on
// the key after it, and hands that out on the next Next, as the contract
// says.
type Cursor struct {
	c   *bolt.Cursor
	cur []byte // the key the cursor is at (valid during the transaction)
	// after is set by Delete: the key (and value) now at the cursor, which
	// Next returns without moving.
	deleted       bool
	after, afterV []byte
}

var _ kv.Cursor = (*Cursor)(nil)

func (c *Cursor) at(k, v []byte) ([]byte, []byte) {
	c.cur, c.deleted = k, false
	return k, v
}

func (c *Cursor) First() (k, v []byte)          { return c.at(c.c.First()) }
func (c *Cursor) Last() (k, v []byte)           { return c.at(c.c.Last()) }
func (c *Cursor) Seek(key []byte) (k, v []byte) { return c.at(c.c.Seek(key)) }

func (c *Cursor) Next() (k, v []byte) {
	if c.deleted {
		return c.at(c.after, c.afterV)
	}
	return c.at(c.c.Next())
}

func (c *Cursor) Prev() (k, v []byte) {
	if c.deleted && c.after == nil {
		// The deleted key was the last: the one before it is now last.
		return c.at(c.c.Last())
	}
	return c.at(c.c.Prev())
}

func (c *Cursor) Delete() error {
	if c.deleted {
		return nil // the key at the cursor is gone already
	}
	if c.cur == nil {
		return c.c.Delete() // bbolt's answer for a cursor at no key
	}
	key := append([]byte(nil), c.cur...)
	if err := c.c.Delete(); err != nil {
		return txErr(err)
	}
	c.after, c.afterV = c.c.Seek(key)
	c.cur, c.deleted = nil, true
	return nil
}

// txErr maps bbolt's errors for a write on a read-only or ended
// transaction to the contract's.
func txErr(err error) error {
	if errors.Is(err, bolt.ErrTxNotWritable) || errors.Is(err, bolt.ErrTxClosed) {
		return kv.ErrTxClosed
	}
	return err
}
