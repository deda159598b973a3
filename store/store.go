// Package store is registryd's index: every record lives in one bbolt file and
// every mutation is one transaction that keeps the invariants (positions stay
// contiguous, names unique, nothing half-written). It is the only package that
// imports bbolt.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"registryd/store/kv"
)

// Options configure Open.
type Options struct {
	// SecretKey is the 32-byte AES-256-GCM key sealing upstream passwords. Required.
	SecretKey []byte
	// LockTimeout is how long Open waits for another process's lock on the
	// database before failing. Default 1s.
	LockTimeout time.Duration
	// Now returns the current time; tests inject a clock. Default time.Now.
	Now func() time.Time
	// Cluster, for tests and engines, shares the store's in-memory views
	// with other nodes (cluster.go): set by Open when the engine implements
	// kv.Cluster. nil: a single node.
	Cluster kv.Cluster
	// Logger receives the store's warnings (a failed cluster publish).
	// Default slog.Default().
	Logger *slog.Logger
}

// Store is the open index.
type Store struct {
	db     *bolt.DB
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
	// cluster is set when other nodes share the engine (cluster.go).
	cluster *clusterState
}

// ErrLocked means another process holds the database.
var ErrLocked = errors.New("the data directory is in use by another registryd process")

// ErrWrongKey means the secret key is not the one this database was created
// with: no sealed password could be read. Open refuses such a key at once
// rather than failing on the first upstream that has a password.
var ErrWrongKey = errors.New("the secrets key does not match this database: restore the original key (DATA_DIR/secrets.key or secrets.key)")

// keyCheck is sealed into the meta bucket on first open to recognise the key.
const keyCheck = "registryd secrets key check"

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
// Evaluated and not set: NoFreelistSync (a commit skips writing the
// freelist, but every Open then walks the whole file to rebuild it, slow
// for a large cache index, for a freelist page that is a few KiB even after
// a large upload); NoSync and NoGrowSync (they give up crash safety).
// FreelistMapType keeps allocation fast when the freelist is large.
const initialMmapSize = (1 << 30) * (strconv.IntSize / 64)

// Open opens (creating when needed) DIR/registry.db.
func Open(dir string, o Options) (*Store, error) {
	if o.LockTimeout == 0 {
		o.LockTimeout = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s, err := newSealer(o.SecretKey)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(dir, "registry.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.LockTimeout, FreelistType: bolt.FreelistMapType,
		InitialMmapSize: initialMmapSize})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("store: %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	st := &Store{db: db, sealer: s, now: o.Now, collect: make(chan struct{}, 1)}
	// A database already at this schema version is only checked: even a
	// commit that changes nothing writes pages, which a start on a full
	// volume must not need.
	current := false
	if err := db.View(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return nil
			}
		}
		meta := tx.Bucket(bktMeta)
		v, sealed := meta.Get(metaSchemaVersion), meta.Get(metaKeyCheck)
		if v == nil || btoi(v) != schemaVersion || sealed == nil {
			return nil
		}
		if plain, err := s.open(sealed); err != nil || plain != keyCheck {
			return ErrWrongKey
		}
		current = true
		return nil
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	if current {
		return st, st.start(o)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bktMeta)
		if v := meta.Get(metaSchemaVersion); v != nil && btoi(v) > schemaVersion {
			return fmt.Errorf("registry.db has schema version %d; this registryd knows %d: upgrade registryd", btoi(v), schemaVersion)
		}
		if sealed := meta.Get(metaKeyCheck); sealed != nil {
			if plain, err := s.open(sealed); err != nil || plain != keyCheck {
				return ErrWrongKey
			}
		} else if err := meta.Put(metaKeyCheck, s.seal(keyCheck)); err != nil {
			return err
		}
		return meta.Put(metaSchemaVersion, itob(schemaVersion))
	}); err != nil {
		db.Close()
		if errors.Is(err, ErrWrongKey) {
			return nil, fmt.Errorf("store: %s: %w", path, err)
		}
		return nil, fmt.Errorf("store: %w", err)
	}
	return st, st.start(o)
}

// start joins the cluster, if any, once the schema is in place.
func (s *Store) start(o Options) error {
	if o.Cluster == nil {
		return nil
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := s.joinCluster(o.Cluster, o.Logger); err != nil {
		s.db.Close()
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.leaveCluster()
	return s.db.Close()
}

// Path is the database file.
func (s *Store) Path() string { return s.db.Path() }

// AuthGeneration changes after every commit that may change an access decision.
func (s *Store) AuthGeneration() uint64 { return s.authGen.Load() }

// CacheGeneration changes after every commit that changes cache entries or
// which upstreams a registry resolves through.
func (s *Store) CacheGeneration() uint64 { return s.cacheGen.Load() }

// Stats are read at scrape time.
type Stats struct {
	FileBytes int64
	TxOpen    int
}

// Stats reports figures of the database for metrics.
func (s *Store) Stats() Stats {
	st := s.db.Stats()
	var size int64
	_ = s.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	return Stats{FileBytes: size, TxOpen: st.OpenTxN}
}

// now returns the store clock truncated to milliseconds, the precision of the API.
func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// update runs fn in one write transaction and bumps the given generations after
// a successful commit. A cache commit that marked entries for destruction (the
// pending and purge buckets draw a sequence number for each mark) also wakes
// the collector.
func (s *Store) update(auth, cache bool, fn func(tx *bolt.Tx) error) error {
	work := false
	err := s.db.Update(func(tx *bolt.Tx) error {
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

func getJSON(b *bolt.Bucket, key []byte, v any) bool {
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

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// childIDs lists the second ids of a two-id index under prefix id.
func childIDs(b *bolt.Bucket, parent int64) []int64 {
	var out []int64
	prefix := itob(parent)
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && len(k) == 16 && string(k[:8]) == string(prefix); k, _ = c.Next() {
		out = append(out, btoi(k[8:]))
	}
	return out
}

func nextID(b *bolt.Bucket) (int64, error) {
	n, err := b.NextSequence()
	return int64(n), err
}
