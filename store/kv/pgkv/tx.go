package pgkv

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"registryd/store/kv"
)

// tx is one transaction. It is not safe for concurrent use (nor is bbolt's).
type tx struct {
	db       *DB
	pg       pgx.Tx
	writable bool
	done     bool
	// err is the first engine failure (sticky): every later call returns
	// nil or an error, and View/Update return it.
	err error

	// known is the committed-bucket cache as it was when the transaction
	// began: every bucket in it was committed before, so this
	// transaction's snapshot (taken at its first statement, later) sees it.
	known map[string]int32
	// buckets are the buckets looked up or created here (nil: missing).
	buckets map[string]*bucket
	// created are the buckets created here, cached in db after commit.
	created []namedID
	// gen counts the writes to each bucket, so a cursor knows that the page
	// it prefetched may be stale.
	gen map[int32]uint64
	// present are the keys this write transaction has seen exist (a Get
	// or a cursor that found the key, or its own Put) and not deleted
	// since: a Put of one is an UPDATE of the row it read, never an upsert
	// (see Put). At most maxPresent are kept (a long walk would keep every
	// key it passed); a key past them is upserted, as any key not seen.
	present map[rowKey]struct{}
}

// maxPresent bounds tx.present: 64k keys of a few dozen bytes.
const maxPresent = 1 << 16

// rowKey names one key of one bucket.
type rowKey struct {
	b int32
	k string
}

// errVanished is the serialization failure of a Put whose key this
// transaction read and whose row is gone: PostgreSQL reports a row deleted
// by a concurrent transaction with 40001 itself, this covers any other way
// the UPDATE could find nothing.
var errVanished = &pgconn.PgError{Code: "40001", Message: "pgkv: a key this transaction read no longer exists"}

// sawPresent records that key exists in this write transaction.
func (t *tx) sawPresent(b int32, key []byte) {
	if !t.writable {
		return
	}
	if t.present == nil {
		t.present = map[rowKey]struct{}{}
	}
	if len(t.present) < maxPresent {
		t.present[rowKey{b, string(key)}] = struct{}{}
	}
}

var _ kv.Tx = (*tx)(nil)

func (t *tx) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), t.db.timeout)
}

// fail records the first engine failure.
func (t *tx) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// usable reports whether a read may go to the server.
func (t *tx) usable() bool { return !t.done && t.err == nil }

// writeErr is the error of a write that cannot go to the server.
func (t *tx) writeErr() error {
	if t.done || !t.writable {
		return kv.ErrTxClosed
	}
	if t.err != nil {
		return unavailable("transaction", t.err)
	}
	return nil
}

func (t *tx) Writable() bool { return t.writable }

// dead is the bucket a failed transaction answers with: every read of it
// returns nil and every write the transaction's error. Answering nil
// instead would turn the store's tx.Bucket(name).Get(...) into a nil
// dereference; the transaction's error is what View or Update return.
func (t *tx) dead() *bucket { return &bucket{t: t, id: -1} }

func (t *tx) Bucket(name []byte) kv.Bucket {
	if b := t.lookup(name); b != nil {
		return b
	}
	return nil // an untyped nil, not a nil *bucket
}

func (t *tx) lookup(name []byte) *bucket {
	if len(name) == 0 {
		return nil
	}
	if !t.usable() {
		return t.dead()
	}
	if b, ok := t.buckets[string(name)]; ok {
		return b
	}
	if t.buckets == nil {
		t.buckets = map[string]*bucket{}
	}
	if id, ok := t.known[string(name)]; ok {
		b := &bucket{t: t, id: id}
		t.buckets[string(name)] = b
		return b
	}
	ctx, cancel := t.ctx()
	defer cancel()
	var id int32
	err := t.pg.QueryRow(ctx, `SELECT id FROM kv_buckets WHERE name = $1`, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		t.buckets[string(name)] = nil
		return nil
	}
	if err != nil {
		t.fail(err)
		return t.dead()
	}
	// Seen in this snapshot: committed, so any later transaction sees it.
	t.db.rememberBuckets([]namedID{{string(name), id}})
	b := &bucket{t: t, id: id}
	t.buckets[string(name)] = b
	return b
}

func (t *tx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	if err := t.writeErr(); err != nil {
		return nil, err
	}
	if len(name) == 0 {
		return nil, ErrBucketName
	}
	if b := t.lookup(name); b != nil {
		return b, nil
	}
	if t.err != nil {
		return nil, unavailable("transaction", t.err)
	}
	ctx, cancel := t.ctx()
	defer cancel()
	// A node creating the same bucket concurrently makes this a
	// serialization failure: the transaction runs again and finds it.
	var id int32
	err := t.pg.QueryRow(ctx, `INSERT INTO kv_buckets (name) VALUES ($1) RETURNING id`, name).Scan(&id)
	if err != nil {
		t.fail(err)
		return nil, unavailable("create bucket", err)
	}
	t.created = append(t.created, namedID{string(name), id})
	b := &bucket{t: t, id: id}
	t.buckets[string(name)] = b
	return b, nil
}

func (t *tx) ForEach(fn func(name []byte, b kv.Bucket) error) error {
	if !t.usable() {
		if t.err != nil {
			return unavailable("transaction", t.err)
		}
		return kv.ErrTxClosed
	}
	ctx, cancel := t.ctx()
	defer cancel()
	rows, err := t.pg.Query(ctx, `SELECT id, name FROM kv_buckets ORDER BY name`)
	if err != nil {
		t.fail(err)
		return unavailable("buckets", err)
	}
	var all []namedID
	for rows.Next() {
		var n namedID
		var name []byte
		if err := rows.Scan(&n.id, &name); err != nil {
			rows.Close()
			t.fail(err)
			return unavailable("buckets", err)
		}
		n.name = string(name)
		all = append(all, n)
	}
	if err := rows.Err(); err != nil {
		t.fail(err)
		return unavailable("buckets", err)
	}
	if t.buckets == nil {
		t.buckets = map[string]*bucket{}
	}
	for _, n := range all {
		b := t.buckets[n.name]
		if b == nil {
			b = &bucket{t: t, id: n.id}
			t.buckets[n.name] = b
		}
		if err := fn([]byte(n.name), b); err != nil {
			return err
		}
	}
	return nil
}

// bucket is a bucket in one transaction.
type bucket struct {
	t  *tx
	id int32
}

var _ kv.Bucket = (*bucket)(nil)

// wrote invalidates the cursors' prefetched pages of this bucket.
func (b *bucket) wrote() {
	if b.t.gen == nil {
		b.t.gen = map[int32]uint64{}
	}
	b.t.gen[b.id]++
}

func (b *bucket) Get(key []byte) []byte {
	t := b.t
	if !t.usable() || len(key) == 0 {
		return nil
	}
	ctx, cancel := t.ctx()
	defer cancel()
	var v []byte
	err := t.pg.QueryRow(ctx, `SELECT v FROM kv WHERE b = $1 AND k = $2`, b.id, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.fail(err)
		return nil
	}
	t.sawPresent(b.id, key)
	if v == nil {
		v = []byte{}
	}
	return v
}

func (b *bucket) Put(key, value []byte) error {
	t := b.t
	if err := t.writeErr(); err != nil {
		return err
	}
	switch {
	case len(key) == 0:
		return ErrKeyRequired
	case len(key) > MaxKeySize:
		return ErrKeyTooLarge
	case value == nil:
		return ErrValueNil
	}
	ctx, cancel := t.ctx()
	defer cancel()
	// A key this transaction saw exist is UPDATEd: if a concurrent
	// transaction deleted (or changed) the row since, PostgreSQL's
	// first-updater-wins rule aborts this one with 40001 whatever its
	// isolation level. The upsert would instead insert the key again (a
	// deleted row is no conflict), resurrecting what the other transaction
	// deleted, with only SERIALIZABLE's predicate locks to catch it. A key
	// not seen is upserted: if a concurrent transaction inserted it, ON
	// CONFLICT DO UPDATE finds a row this snapshot cannot see and aborts
	// with 40001 too (it never overwrites a concurrent insert).
	rk := rowKey{b.id, string(key)}
	var err error
	if _, seen := t.present[rk]; seen {
		var tag pgconn.CommandTag
		tag, err = t.pg.Exec(ctx, `UPDATE kv SET v = $3 WHERE b = $1 AND k = $2`, b.id, key, value)
		if err == nil && tag.RowsAffected() != 1 {
			err = errVanished
		}
	} else {
		_, err = t.pg.Exec(ctx, `INSERT INTO kv (b, k, v) VALUES ($1, $2, $3)
ON CONFLICT (b, k) DO UPDATE SET v = excluded.v`, b.id, key, value)
	}
	b.wrote()
	if err != nil {
		t.fail(err)
		return unavailable("put", err)
	}
	t.sawPresent(b.id, key)
	return nil
}

func (b *bucket) Delete(key []byte) error {
	t := b.t
	if err := t.writeErr(); err != nil {
		return err
	}
	if len(key) == 0 {
		return nil
	}
	ctx, cancel := t.ctx()
	defer cancel()
	_, err := t.pg.Exec(ctx, `DELETE FROM kv WHERE b = $1 AND k = $2`, b.id, key)
	delete(t.present, rowKey{b.id, string(key)})
	b.wrote()
	if err != nil {
		t.fail(err)
		return unavailable("delete", err)
	}
	return nil
}

func (b *bucket) Cursor() kv.Cursor { return &cursor{b: b} }

func (b *bucket) ForEach(fn func(k, v []byte) error) error {
	c := &cursor{b: b}
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	if b.t.err != nil {
		return unavailable("transaction", b.t.err)
	}
	return nil
}

// Sequences are bigint columns holding the uint64's bits.

func (b *bucket) NextSequence() (uint64, error) {
	t := b.t
	if err := t.writeErr(); err != nil {
		return 0, err
	}
	ctx, cancel := t.ctx()
	defer cancel()
	var v int64
	if err := t.pg.QueryRow(ctx, `UPDATE kv_buckets SET seq = seq + 1 WHERE id = $1 RETURNING seq`, b.id).Scan(&v); err != nil {
		t.fail(err)
		return 0, unavailable("sequence", err)
	}
	return uint64(v), nil
}

func (b *bucket) Sequence() uint64 {
	t := b.t
	if !t.usable() {
		return 0
	}
	ctx, cancel := t.ctx()
	defer cancel()
	var v int64
	if err := t.pg.QueryRow(ctx, `SELECT seq FROM kv_buckets WHERE id = $1`, b.id).Scan(&v); err != nil {
		t.fail(err)
		return 0
	}
	return uint64(v)
}

func (b *bucket) SetSequence(v uint64) error {
	t := b.t
	if err := t.writeErr(); err != nil {
		return err
	}
	ctx, cancel := t.ctx()
	defer cancel()
	if _, err := t.pg.Exec(ctx, `UPDATE kv_buckets SET seq = $2 WHERE id = $1`, b.id, int64(v)); err != nil {
		t.fail(err)
		return unavailable("sequence", err)
	}
	return nil
}

// KeyN is SELECT count(*): O(n) (see kv.Bucket).
func (b *bucket) KeyN() int {
	t := b.t
	if !t.usable() {
		return 0
	}
	ctx, cancel := t.ctx()
	defer cancel()
	var n int64
	if err := t.pg.QueryRow(ctx, `SELECT count(*) FROM kv WHERE b = $1`, b.id).Scan(&n); err != nil {
		t.fail(err)
		return 0
	}
	return int(n)
}
