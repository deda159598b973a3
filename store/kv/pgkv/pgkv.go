// Package pgkv is the PostgreSQL engine of package kv: the index of several
// registryd nodes in one shared database.
//
// Every bucket key/value is a row of one table (see migrations for the
// schema and why). A write transaction (Update) is a SERIALIZABLE
// PostgreSQL transaction: PostgreSQL's serializable snapshot isolation
// guarantees that concurrent transactions give the result of some serial
// order, so every invariant store keeps inside one bbolt transaction is kept
// across nodes. Belt and braces, the writes are such that snapshot
// isolation alone (what is left if the serializable checks miss a
// conflict) loses no write either: a key the transaction saw exist is UPDATEd,
// so a concurrent delete or change of it aborts one of the two (PostgreSQL's
// first-updater-wins), and a key it did not read is upserted, whose ON
// CONFLICT aborts rather than overwrite a concurrent insert (tx.go, Put;
// guards_test.go interleaves them at REPEATABLE READ). The price is
// that PostgreSQL aborts one of two conflicting transactions with SQLSTATE
// 40001 (or 40P01 for a deadlock); Update then runs the function again from
// the start, with a jittered backoff, a bounded number of times (Retries
// counts them). A read transaction (View) is REPEATABLE READ READ ONLY: one
// snapshot, never aborted.
//
// Every statement is bound by a timeout (Options.QueryTimeout), so a hung
// server fails a transaction instead of hanging it. A failure of the engine
// inside a transaction is sticky, as package kv requires: the failing call
// and every later one return nil, and View/Update return an error wrapping
// kv.ErrUnavailable whatever the function returned.
//
// *DB also implements kv.Cluster (cluster.go): LISTEN/NOTIFY with a
// periodic re-check, and session advisory locks on dedicated connections.
//
// Sizing the server: serializable transactions keep predicate locks; a
// server with many concurrent range scans wants max_pred_locks_per_transaction
// above its default of 64 (the tests use 256), and max_connections must
// cover every node's MaxConns + MaxLocks + 1 (its listener).
package pgkv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"registryd/store/kv"
)

// Options configure Open.
type Options struct {
	// DSN is a libpq connection string or URL (postgres://user:pass@host/db).
	DSN string
	// MaxConns bounds the pool of transaction connections (default 16).
	MaxConns int32
	// MaxLocks bounds the cluster locks held (or waited for) at once by this
	// node: each holds a connection of its own for its lifetime (default
	// 32). Past it, Lock and TryLock wait for a lock to be released (or
	// their ctx to end).
	MaxLocks int32
	// Logger receives reconnects and retries (default: discarded).
	Logger *slog.Logger
	// RecheckInterval is the default interval of Subscribe's re-check
	// (default 2s).
	RecheckInterval time.Duration
	// QueryTimeout bounds every statement (default 10s).
	QueryTimeout time.Duration
}

// maxAttempts bounds how often Update runs its function when PostgreSQL
// keeps aborting it for serialization failures; then Update gives up with
// an error wrapping kv.ErrUnavailable (the database is overloaded with
// conflicts: a 503 is the honest answer).
const maxAttempts = 64

// MaxKeySize is the longest key Put accepts. A btree index entry must fit
// in a third of a page (about 2.7 kB with the bucket id); bbolt allows 32
// kB, store's keys are far shorter.
const MaxKeySize = 2048

// Errors of the caller (not of the engine): they do not end the transaction.
var (
	ErrKeyRequired = errors.New("pgkv: key required")
	ErrKeyTooLarge = errors.New("pgkv: key too large")
	ErrValueNil    = errors.New("pgkv: nil value")
	ErrBucketName  = errors.New("pgkv: bucket name required")
)

// DB is an open PostgreSQL engine.
type DB struct {
	pool     *pgxpool.Pool // transactions, Publish, Stats
	lockPool *pgxpool.Pool // one connection per held cluster lock
	listen   *pgx.ConnConfig
	log      *slog.Logger
	timeout  time.Duration
	recheck  time.Duration
	desc     string

	// buckets caches the ids of committed buckets (name -> id), copied on
	// write. Buckets are never deleted and ids never change, so an entry
	// that was in the map when a transaction began names a bucket its
	// snapshot sees (see tx.known).
	buckets   atomic.Pointer[map[string]int32]
	bucketsMu sync.Mutex

	// writeOpts begin a write transaction: SERIALIZABLE. Only a test
	// changes it (to REPEATABLE READ: snapshot isolation, as if the
	// serializable checks had missed a conflict) to see what guards
	// remain without them.
	writeOpts pgx.TxOptions

	retries  atomic.Uint64
	resyncs  atomic.Uint64
	rechecks atomic.Uint64 // for tests

	subscribed atomic.Bool
	stop       context.CancelFunc
	stopCtx    context.Context
	wg         sync.WaitGroup

	locksMu sync.Mutex
	locks   map[*heldLock]struct{}

	closeOnce sync.Once
}

var (
	_ kv.DB      = (*DB)(nil)
	_ kv.Cluster = (*DB)(nil)
)

// Open connects to the database and brings its schema up to date (one node
// at a time). Errors reaching the server wrap kv.ErrUnavailable.
func Open(ctx context.Context, o Options) (*DB, error) {
	if o.DSN == "" {
		return nil, errors.New("pgkv: DSN required")
	}
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgkv: DSN: %w", err)
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.MaxLocks <= 0 {
		o.MaxLocks = 32
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = 2 * time.Second
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 10 * time.Second
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "registryd"
	}
	cfg.MaxConns = o.MaxConns

	// Lock connections: named, so an operator sees them in
	// pg_stat_activity; a waiter whose process died is noticed by the
	// server within a second (client_connection_check_interval), not when
	// it finally gets the lock; a Lock whose ctx ends sends a cancel
	// request, so its backend leaves the lock queue at once.
	lockCfg := cfg.Copy()
	lockCfg.MaxConns = o.MaxLocks
	lockCfg.ConnConfig.RuntimeParams["application_name"] = "registryd-lock"
	lockCfg.ConnConfig.RuntimeParams["client_connection_check_interval"] = "1000"
	lockCfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}

	listenCfg := cfg.ConnConfig.Copy()
	listenCfg.RuntimeParams["application_name"] = "registryd-listen"

	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("pgkv: %w", err)
	}
	lockPool, err := pgxpool.NewWithConfig(context.Background(), lockCfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgkv: %w", err)
	}
	db := &DB{
		pool:     pool,
		lockPool: lockPool,
		listen:   listenCfg,
		log:      o.Logger,
		timeout:  o.QueryTimeout,
		recheck:  o.RecheckInterval,
		desc:     describe(cfg.ConnConfig),
		locks:    map[*heldLock]struct{}{},

		writeOpts: serializableWrite,
	}
	db.buckets.Store(&map[string]int32{})
	db.stopCtx, db.stop = context.WithCancel(context.Background())
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// describe names the database without its password.
func describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("postgres://%s@%s/%s", c.User, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), c.Database)
}

// Describe names the database (a DSN without its password).
func (db *DB) Describe() string { return db.desc }

// Retries counts the transactions run again after a serialization failure
// or a deadlock, for a metric.
func (db *DB) Retries() uint64 { return db.retries.Load() }

// Resyncs counts Subscribe's fn(nil) calls (reconnects and lost messages),
// for a metric.
func (db *DB) Resyncs() uint64 { return db.resyncs.Load() }

// LocksHeld is the number of cluster locks this node holds now.
func (db *DB) LocksHeld() int {
	db.locksMu.Lock()
	defer db.locksMu.Unlock()
	return len(db.locks)
}

// Close stops the subscriber, releases the locks still held and closes the
// connections. It waits for running transactions.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.stop()
		db.wg.Wait()
		db.locksMu.Lock()
		held := make([]*heldLock, 0, len(db.locks))
		for l := range db.locks {
			held = append(held, l)
		}
		db.locksMu.Unlock()
		for _, l := range held {
			l.unlock()
		}
		db.lockPool.Close()
		db.pool.Close()
	})
	return nil
}

// Stats reads the size of the tables (bounded by a short timeout: a scrape
// must not hang on a dead server; Bytes is 0 then) and the connections in
// use.
func (db *DB) Stats() kv.Stats {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	_ = db.pool.QueryRow(ctx, `SELECT pg_total_relation_size('kv') + pg_total_relation_size('kv_buckets')`).Scan(&n)
	return kv.Stats{Bytes: n, OpenTx: int(db.pool.Stat().AcquiredConns())}
}

// unavailable wraps an engine failure.
func unavailable(op string, err error) error {
	return fmt.Errorf("%w: pgkv %s: %w", kv.ErrUnavailable, op, err)
}

// retryable reports a serialization failure or a deadlock: the transaction
// was rolled back by PostgreSQL and may simply run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// View runs fn in a REPEATABLE READ READ ONLY transaction.
func (db *DB) View(fn func(kv.Tx) error) error { return db.run(false, fn) }

// Update runs fn in a SERIALIZABLE transaction, again from the start when
// PostgreSQL aborts it for a serialization failure or a deadlock.
func (db *DB) Update(fn func(kv.Tx) error) error { return db.run(true, fn) }

func (db *DB) run(write bool, fn func(kv.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err, again := db.attempt(write, fn)
		if !again {
			return err
		}
		if attempt == maxAttempts {
			return fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		db.retries.Add(1)
		db.log.Debug("pgkv: transaction retried", "attempt", attempt, "err", err)
		// Full jitter over an exponential ceiling (2ms .. 128ms): the
		// transactions that collided must not collide again in lockstep.
		ceiling := 2 * time.Millisecond << min(attempt-1, 6)
		time.Sleep(ceiling/4 + rand.N(ceiling*3/4))
	}
}

var (
	serializableWrite = pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadWrite}
	readOpts          = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
)

// begin starts a transaction. A failed BEGIN did nothing, so it is tried
// again at once (twice): a pooled connection may have died with a restart
// of the server, and the pool replaces it.
func (db *DB) begin(write bool) (pgx.Tx, error) {
	opts := readOpts
	if write {
		opts = db.writeOpts
	}
	var err error
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), db.timeout)
		var t pgx.Tx
		t, err = db.pool.BeginTx(ctx, opts)
		cancel()
		if err == nil {
			return t, nil
		}
		if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
			break
		}
	}
	return nil, err
}

// attempt runs fn once; again reports a serialization failure.
func (db *DB) attempt(write bool, fn func(kv.Tx) error) (err error, again bool) {
	pt, err := db.begin(write)
	if err != nil {
		return unavailable("begin", err), false
	}
	t := &tx{db: db, pg: pt, writable: write, known: *db.buckets.Load()}
	finished := false
	defer func() {
		t.done = true
		if !finished { // fn panicked
			ctx, cancel := context.WithTimeout(context.Background(), db.timeout)
			pt.Rollback(ctx)
			cancel()
		}
	}()
	ferr := fn(t)
	ctx, cancel := context.WithTimeout(context.Background(), db.timeout)
	defer cancel()
	if t.err != nil || ferr != nil {
		finished = true
		pt.Rollback(ctx)
		if t.err != nil {
			return unavailable("transaction", t.err), retryable(t.err)
		}
		return ferr, false
	}
	finished = true
	if err := pt.Commit(ctx); err != nil {
		// A connection lost during COMMIT leaves it unknown whether the
		// transaction committed: never retried, reported unavailable.
		return unavailable("commit", err), retryable(err)
	}
	if len(t.created) > 0 {
		db.rememberBuckets(t.created)
	}
	return nil, false
}

// rememberBuckets adds committed buckets to the cache.
func (db *DB) rememberBuckets(bs []namedID) {
	db.bucketsMu.Lock()
	defer db.bucketsMu.Unlock()
	old := *db.buckets.Load()
	fresh := false
	for _, b := range bs {
		if _, ok := old[b.name]; !ok {
			fresh = true
		}
	}
	if !fresh {
		return
	}
	m := make(map[string]int32, len(old)+len(bs))
	for k, v := range old {
		m[k] = v
	}
	for _, b := range bs {
		m[b.name] = b.id
	}
	db.buckets.Store(&m)
}

type namedID struct {
	name string
	id   int32
}
