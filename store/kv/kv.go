// Package kv is the engine contract under package store: an ordered
// key/value space of named buckets with serializable transactions. store
// keeps every invariant of registryd's index inside one transaction of this
// contract; two engines implement it:
//
//   - boltkv: one bbolt file, single writer (the embedded default);
//   - pgkv: PostgreSQL, shared by several registryd nodes. A write
//     transaction is a SERIALIZABLE PostgreSQL transaction that is retried
//     from the start when PostgreSQL reports a serialization failure or a
//     deadlock, so a function passed to Update must be safe to run again:
//     it may only assign to variables it also resets, never send on
//     channels or bump counters inside the transaction.
//
// The contract is the subset of bbolt's API that store uses, so store code
// reads as it did on bbolt. Differences an engine must hide or report:
//
//   - A read or write that fails inside the engine (a lost connection, a
//     timeout) cannot be returned by Get or a cursor move. The engine then
//     returns nil from that call and every later one in the transaction, and
//     View/Update return the engine's error (wrapping ErrUnavailable), never
//     the function's: a function that saw a spurious nil and answered
//     ErrNotFound must not turn an outage into a 404.
//   - Byte slices returned by Get and cursors are valid until the transaction
//     ends (bbolt's rule); callers copy what they keep.
//   - Buckets are flat (no nested buckets).
//
// What is one engine's tuning stays in that engine's Options (bbolt's page
// fill of append-mostly buckets is boltkv.Options.AppendMostly), and what
// costs O(n) is said so (KeyN).
package kv

import (
	"context"
	"errors"
	"time"
)

// ErrUnavailable wraps every failure of the engine itself (as opposed to an
// error returned by the transaction's function): the database is down,
// unreachable or timed out. Listeners map it to 503.
var ErrUnavailable = errors.New("the index database is unavailable")

// ErrTxClosed is returned by writes on a transaction that has ended or is
// read-only.
var ErrTxClosed = errors.New("kv: transaction closed or not writable")

// DB is an open engine.
type DB interface {
	// View runs fn in a read-only transaction that sees one consistent
	// snapshot.
	View(fn func(Tx) error) error
	// Update runs fn in a read-write transaction and commits when fn
	// returns nil. fn may run more than once (see the package comment).
	Update(fn func(Tx) error) error
	// Close releases the engine.
	Close() error
	// Stats are read at metrics scrape time.
	Stats() Stats
	// Describe names where the data lives for logs and errors: a file path,
	// or a DSN with its password removed.
	Describe() string
}

// Stats are engine figures for metrics.
type Stats struct {
	// Bytes is the size of the data: the bbolt file, or the PostgreSQL
	// table with its indexes.
	Bytes int64
	// OpenTx is the number of open transactions (bbolt) or connections in
	// use (PostgreSQL).
	OpenTx int
	// FreeBytes is the part of Bytes no data uses and the engine will
	// reuse before growing: bbolt's free pages. 0 on PostgreSQL (its
	// free space is VACUUM's business).
	FreeBytes int64
	// PendingBytes is space freed by commits that an open read
	// transaction may still see: bbolt reuses it once every reader older
	// than the commit has ended. A figure that keeps growing means a read
	// transaction lives too long, and the file grows instead. 0 on
	// PostgreSQL.
	PendingBytes int64
}

// Tx is one transaction.
type Tx interface {
	// Bucket returns the named bucket, or nil when it does not exist.
	Bucket(name []byte) Bucket
	// CreateBucketIfNotExists creates the bucket (write transactions only).
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	// ForEach calls fn for every bucket in name order.
	ForEach(fn func(name []byte, b Bucket) error) error
	// Writable reports whether this is a write transaction.
	Writable() bool
}

// Bucket is an ordered map of byte keys to byte values, with a sequence.
type Bucket interface {
	// Get returns the value of key, or nil.
	Get(key []byte) []byte
	// Put sets key to value; neither may be empty (a nil value is refused).
	Put(key, value []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(key []byte) error
	// Cursor iterates the bucket in key order.
	Cursor() Cursor
	// ForEach calls fn for every key in order; fn must not modify the
	// bucket. An error from fn stops the walk and is returned.
	ForEach(fn func(k, v []byte) error) error
	// NextSequence increments and returns the bucket's sequence (write
	// transactions only). The first call returns 1.
	NextSequence() (uint64, error)
	// Sequence returns the bucket's sequence without changing it.
	Sequence() uint64
	// SetSequence sets the bucket's sequence (write transactions only).
	SetSequence(v uint64) error
	// KeyN counts the keys of the bucket, as this transaction sees them.
	// It is O(n) on every engine (bbolt walks the bucket's pages or keys,
	// PostgreSQL counts its rows): for a one-off count (a migration, a
	// check, a test), never for a path that runs per request or per scrape;
	// store keeps counters for those.
	KeyN() int
}

// Cursor walks a bucket. A nil key means the walk ran off either end.
type Cursor interface {
	First() (k, v []byte)
	Last() (k, v []byte)
	// Seek moves to key, or to the next key after it.
	Seek(key []byte) (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
	// Delete removes the key at the cursor; the next Next returns the key
	// after it.
	Delete() error
}

// Cluster is what an engine shared by several registryd nodes offers on
// top of DB so that the nodes agree without talking to each other. An
// engine used by one process alone (boltkv) does not implement it; store
// then keeps everything in process.
type Cluster interface {
	// Publish sends msg (at most 7900 bytes) to every node's Subscribe
	// callback, this node's included. Delivery is at most once; lost
	// messages are covered by Subscribe's resync.
	Publish(ctx context.Context, msg []byte) error
	// Subscribe registers fn, called from one goroutine for each message
	// published by any node, in order per publisher. fn(nil) means messages
	// may have been lost (a reconnect, or the periodic re-check found that
	// more was published than was received): the subscriber must treat
	// everything as changed. The re-check runs every interval (engines
	// default to 2s when 0). Subscribe is called once, before use.
	Subscribe(fn func(msg []byte), interval time.Duration)
	// Lock takes the cluster-wide lock named key, waiting until it is free
	// or ctx ends. The lock is held by this node's connection: when the node
	// dies or loses its connection the lock is released at once. unlock is
	// safe to call more than once.
	Lock(ctx context.Context, key string) (unlock func(), err error)
	// TryLock takes the lock named key when it is free, without waiting.
	TryLock(ctx context.Context, key string) (unlock func(), ok bool, err error)
}
