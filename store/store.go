// Package store is registryd's index: every record lives in a kv engine
// (package store/kv: one bbolt file, DATA_DIR/registry.db, through
// store/kv/boltkv; or PostgreSQL, shared by several nodes, through
// store/kv/pgkv), which the caller opens and hands to Open (cmd opens
// either the same way), and every mutation is one transaction that keeps
// the invariants (positions stay contiguous, names unique, nothing
// half-written). The package imports no engine. The bytes of cached files
// are package store/blob's; blobbind.go binds entries to them.
//
// A function passed to update or db.Update may run more than once (an engine
// retries a transaction that lost a serialization conflict): it resets every
// outer variable it assigns, works on a copy of what it changes of its
// inputs, and leaves side effects (generations, the collector's wake-up) to
// after the commit.
//
// Every write transaction also counts the keys added to and removed from
// the buckets whose sizes the metrics and totals report (counts.go), so
// that reading a size never walks a bucket.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"registryd/store/kv"
)

// Options configure Open.
type Options struct {
	// SecretKey is the 32-byte AES-256-GCM key sealing upstream passwords. Required.
	SecretKey []byte
	// Now returns the current time; tests inject a clock. Default time.Now.
	Now func() time.Time
	// Engine is the kv engine holding the index (boltkv or pgkv). Required.
	// Open takes it over: Store.Close, or a failed Open, closes it.
	Engine kv.DB
	// Cluster, for tests and engines, shares the store's in-memory views
	// with other nodes (cluster.go): default: the engine, when it
	// implements kv.Cluster; nil and an engine that does not: a single node.
	Cluster kv.Cluster
	// Logger receives the store's warnings (a failed cluster publish).
	// Default slog.Default().
	Logger *slog.Logger
	// BatchMaxEntries bounds the entry writes (fills, revalidations) one
	// shared transaction carries (group commit, batch.go). 1 turns group
	// commit off: each write is a transaction of its own. Default 256.
	BatchMaxEntries int
	// BatchMaxHold bounds how long a shared transaction runs writes before
	// it commits, so that it holds the engine's writer briefly. Default 10ms.
	BatchMaxHold time.Duration
	// Matcher decides which versions an advisory affects (osv.Matcher).
	// Without one, advisories are kept but match no dependency.
	Matcher AdvisoryMatcher
}

// Store is the open index.
type Store struct {
	// db is the engine as the store writes to it: its write transactions
	// count the keys of the counted buckets (counts.go). Every write goes
	// through it; engine is the engine itself, for what is not a
	// transaction of the store's (the schema's set-up, the cluster).
	db     kv.DB
	engine kv.DB
	sealer *sealer
	now    func() time.Time

	// authGen changes whenever anything that feeds an access decision changes
	// (users, tokens, memberships, groups, projects). Caches of decisions
	// compare it to know they are stale.
	authGen atomic.Uint64
	// cacheGen changes whenever cache entries or registry topology change, for
	// caches of resolution data in the proxy.
	cacheGen atomic.Uint64
	// forget voids the proxy's negative cache per upstream (forget.go).
	forget forgetEpochs
	// collect receives a value (never blocking, buffer 1) after a commit
	// that gave the collector work; see CollectWanted.
	collect chan struct{}
	// useBuilt caches that cache_by_use is complete (cache_use.go).
	useBuilt atomic.Bool
	// readFailures counts the reads that answer a plain value (an access
	// level, a yes/no) and could not tell the engine's failure: callers that
	// cache such answers compare it before and after (ReadFailures).
	readFailures atomic.Uint64
	// cluster is set when other nodes share the engine (cluster.go).
	cluster *clusterState
	// batch runs entry writes in shared transactions (batch.go); nil when
	// group commit is off.
	batch *batcher
	// matcher matches dependencies against advisories (Options.Matcher);
	// advFilter is the set of packages that have advisories, as of an
	// advisory generation (advisories_match.go).
	matcher   AdvisoryMatcher
	advFilter atomic.Pointer[advisoryFilter]
}

// ErrWrongKey means the secret key is not the one this database was created
// with: no sealed password could be read. Open refuses such a key at once
// rather than failing on the first upstream that has a password.
var ErrWrongKey = errors.New("the secrets key does not match this database: restore the original key (DATA_DIR/secrets.key or secrets.key)")

// keyCheck is sealed into the meta bucket on first open to recognise the key.
const keyCheck = "registryd secrets key check"

// schemaLockKey is the cluster-wide lock under which a node checks and sets
// up the schema, so that nodes starting together do not race to create the
// buckets or seal the key check.
const schemaLockKey = "registryd:schema"

// schemaLockTimeout bounds the wait for another node's schema set-up: it
// holds the lock for a few transactions, far less than this, unless its
// database is unreachable, which Open then reports rather than hanging.
const schemaLockTimeout = time.Minute

// Open opens the index on o.Engine, setting the schema up on a new
// database.
func Open(o Options) (*Store, error) {
	if o.Engine == nil {
		return nil, errors.New("store: no engine")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s, err := newSealer(o.SecretKey)
	if err != nil {
		o.Engine.Close()
		return nil, err
	}
	db := o.Engine
	st := &Store{db: newKeyCountDB(db), engine: db, sealer: s, now: o.Now, collect: make(chan struct{}, 1), matcher: o.Matcher}
	if o.BatchMaxEntries == 0 {
		o.BatchMaxEntries = defaultBatchMaxEntries
	}
	if o.BatchMaxHold <= 0 {
		o.BatchMaxHold = defaultBatchMaxHold
	}
	if o.BatchMaxEntries > 1 {
		st.batch = newBatcher(st.db, o.BatchMaxEntries, o.BatchMaxHold, st.committed)
	}
	if c, ok := db.(kv.Cluster); ok {
		// ctx bounds the wait; it is cancelled after the unlock, in case an
		// engine ties the lock's connection to it.
		ctx, cancel := context.WithTimeout(context.Background(), schemaLockTimeout)
		defer cancel()
		unlock, err := c.Lock(ctx, schemaLockKey)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("store: %s: schema lock: %w", db.Describe(), err)
		}
		defer unlock()
	}
	if err := st.setUpSchema(); err != nil {
		db.Close()
		return nil, err
	}
	if err := st.joinClusterOf(o); err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

// setUpSchema checks the schema version and the key, creating the buckets
// and sealing the key check on a new database, and takes the key counts of
// a database written without them.
func (st *Store) setUpSchema() error {
	db, s, path := st.engine, st.sealer, st.engine.Describe()
	// A database already at this schema version is only checked: even a
	// commit that changes nothing writes pages, which a start on a full
	// volume must not need.
	current := false
	if err := db.View(func(tx kv.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return nil
			}
		}
		meta := tx.Bucket(bktMeta)
		v, sealed := meta.Get(metaSchemaVersion), meta.Get(metaKeyCheck)
		if v == nil || btoi(v) != schemaVersion || sealed == nil || !countsKept(tx) {
			return nil
		}
		if plain, err := s.open(sealed); err != nil || plain != keyCheck {
			return ErrWrongKey
		}
		current = true
		return nil
	}); err != nil {
		return fmt.Errorf("store: %s: %w", path, err)
	}
	if current {
		return nil
	}
	if err := db.Update(func(tx kv.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bktMeta)
		from := int64(0) // a new database
		if v := meta.Get(metaSchemaVersion); v != nil {
			from = btoi(v)
		}
		if from > schemaVersion {
			return fmt.Errorf("registry.db has schema version %d; this registryd knows %d: upgrade registryd", from, schemaVersion)
		}
		if sealed := meta.Get(metaKeyCheck); sealed != nil {
			if plain, err := s.open(sealed); err != nil || plain != keyCheck {
				return ErrWrongKey
			}
		} else if err := meta.Put(metaKeyCheck, s.seal(keyCheck)); err != nil {
			return err
		}
		// Written by a registryd older than countsSchema, the buckets
		// changed without their counts: they are counted once, here.
		if from < countsSchema || !countsKept(tx) {
			if err := countKeysTx(tx); err != nil {
				return err
			}
		}
		return meta.Put(metaSchemaVersion, itob(schemaVersion))
	}); err != nil {
		if errors.Is(err, ErrWrongKey) {
			return fmt.Errorf("store: %s: %w", path, err)
		}
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// joinClusterOf joins the cluster the options or the engine name, if any,
// once the schema is in place.
func (s *Store) joinClusterOf(o Options) error {
	c := o.Cluster
	if c == nil {
		c, _ = s.engine.(kv.Cluster)
	}
	if c == nil {
		return nil
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := s.joinCluster(c, o.Logger); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Close leaves the cluster, if any, and closes the engine.
func (s *Store) Close() error {
	s.leaveCluster()
	return s.engine.Close()
}

// ReadFailures counts the engine failures met by the reads that answer a
// plain value (GroupAccessLevel, ProjectAccessLevel, HasMembershipUnder
// answer "no access" then). A cache of such answers keeps one only when
// the count did not move while it was computed, so an outage of the
// index's database is never remembered as a decision.
func (s *Store) ReadFailures() uint64 { return s.readFailures.Load() }

// AuthGeneration changes after every commit that may change an access decision.
func (s *Store) AuthGeneration() uint64 { return s.authGen.Load() }

// CacheGeneration changes after every commit that changes cache entries or
// which upstreams a registry resolves through.
func (s *Store) CacheGeneration() uint64 { return s.cacheGen.Load() }

// Stats are read at scrape time.
type Stats struct {
	FileBytes int64
	TxOpen    int
	// FreeBytes and PendingBytes: see kv.Stats.
	FreeBytes, PendingBytes int64
}

// Stats reports figures of the database for metrics.
func (s *Store) Stats() Stats {
	st := s.engine.Stats()
	return Stats{FileBytes: st.Bytes, TxOpen: st.OpenTx, FreeBytes: st.FreeBytes, PendingBytes: st.PendingBytes}
}

// now returns the store clock truncated to milliseconds, the precision of the API.
func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// update runs fn in one write transaction and bumps the given generations after
// a successful commit. A cache commit that marked entries for destruction (the
// pending and purge buckets draw a sequence number for each mark) also wakes
// the collector.
func (s *Store) update(auth, cache bool, fn func(tx kv.Tx) error) error {
	work := false
	err := s.db.Update(func(tx kv.Tx) error {
		if !cache {
			return fn(tx)
		}
		pending, purges := tx.Bucket(bktCachePending), tx.Bucket(bktCachePurges)
		p, m := pending.Sequence(), purges.Sequence()
		if err := fn(tx); err != nil {
			return err
		}
		work = pending.Sequence() != p || purges.Sequence() != m
		return nil
	})
	if err == nil {
		s.committed(auth, cache, work)
	}
	return err
}

func getJSON(b kv.Bucket, key []byte, v any) bool {
	raw := b.Get(key)
	if raw == nil {
		return false
	}
	// Stored records were written by this package; a decoding failure is a
	// corrupt database, which must not be papered over.
	if err := json.Unmarshal(raw, v); err != nil {
		panic(fmt.Sprintf("store: corrupt record %x: %v", key, err))
	}
	return true
}

func putJSON(b kv.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// childIDs lists the second ids of a two-id index under prefix id.
func childIDs(b kv.Bucket, parent int64) []int64 {
	var out []int64
	prefix := itob(parent)
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && len(k) == 16 && string(k[:8]) == string(prefix); k, _ = c.Next() {
		out = append(out, btoi(k[8:]))
	}
	return out
}

func nextID(b kv.Bucket) (int64, error) {
	n, err := b.NextSequence()
	return int64(n), err
}

// emptyValue is the value of index keys, whose key says it all. kv refuses
// nil values (a nil value from a bbolt cursor means a nested bucket), so an
// index entry stores an empty one; bbolt wrote nil as empty, so the file is
// the same.
var emptyValue = []byte{}
