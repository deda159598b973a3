package pgkv

import (
	"context"
	"encoding/base64"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// channel is the LISTEN/NOTIFY channel of registryd's nodes.
const channel = "registryd"

// MaxMessage is the longest message Publish accepts (kv.Cluster's bound).
// PostgreSQL's NOTIFY payload must be under 8000 bytes of text without NUL:
// a message that is valid UTF-8 without NUL goes as is; any other is sent
// base64-encoded, which bounds such binary messages at MaxBinaryMessage.
const (
	MaxMessage       = 7900
	MaxBinaryMessage = 5900
)

// ErrMessageTooLarge is returned by Publish for a message over the bounds.
var ErrMessageTooLarge = errors.New("pgkv: message too large to publish")

// Publish sends msg to every subscriber of the database, this node's
// included. The payload is "<n>:<t|b><message>", n the message's number
// from the sequence registryd_published (see Subscribe), 't' a text
// message, 'b' a base64 one.
func (db *DB) Publish(ctx context.Context, msg []byte) error {
	var payload string
	if utf8.Valid(msg) && !strings.ContainsRune(string(msg), 0) {
		if len(msg) > MaxMessage {
			return ErrMessageTooLarge
		}
		payload = "t" + string(msg)
	} else {
		if len(msg) > MaxBinaryMessage {
			return ErrMessageTooLarge
		}
		payload = "b" + base64.StdEncoding.EncodeToString(msg)
	}
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	if _, err := db.pool.Exec(ctx, `SELECT pg_notify('`+channel+`', nextval('registryd_published')::text || ':' || $1)`, payload); err != nil {
		return unavailable("publish", err)
	}
	return nil
}

func decodeMessage(payload string) (seq uint64, msg []byte, ok bool) {
	n, rest, found := strings.Cut(payload, ":")
	if !found || rest == "" {
		return 0, nil, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return 0, nil, false
	}
	switch rest[0] {
	case 't':
		return seq, []byte(rest[1:]), true
	case 'b':
		b, err := base64.StdEncoding.DecodeString(rest[1:])
		return seq, b, err == nil
	}
	return 0, nil, false
}

// Subscribe listens on a dedicated connection (application_name
// registryd-listen) and calls fn for every message, from one goroutine.
//
// Lost messages: every Publish takes a number from the sequence
// registryd_published and carries it. The subscriber notes which numbers it
// received; every interval it reads the sequence's last_value on the same
// connection (which also proves the connection alive). A number that was
// already allocated at the previous re-check and has still not arrived was
// lost (or its Publish failed after taking it): fn(nil). Waiting one
// interval leaves time for notifications in flight. After a reconnect,
// anything published meanwhile was missed: fn(nil) as well.
//
// Subscribe waits (up to 5s) until the first LISTEN is in place, so that a
// message published after it returns reaches fn; if the server cannot be
// reached by then, it keeps trying in the background and calls fn(nil) once
// connected.
func (db *DB) Subscribe(fn func(msg []byte), interval time.Duration) {
	if !db.subscribed.CompareAndSwap(false, true) {
		panic("pgkv: Subscribe called twice")
	}
	if interval <= 0 {
		interval = db.recheck
	}
	s := &subscriber{db: db, fn: fn, interval: interval, ready: make(chan struct{})}
	db.wg.Add(1)
	go func() {
		defer db.wg.Done()
		s.run(db.stopCtx)
	}()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-s.ready:
	case <-t.C:
		db.log.Warn("pgkv: subscriber not connected yet; continuing in the background", "db", db.desc)
	case <-db.stopCtx.Done():
	}
	s.mu.Lock()
	s.returned = true
	s.mu.Unlock()
}

type subscriber struct {
	db       *DB
	fn       func([]byte)
	interval time.Duration
	ready    chan struct{}
	once     sync.Once

	mu       sync.Mutex
	returned bool // Subscribe has returned: a later first connection may have missed messages

	// Accounting of message numbers (see Subscribe).
	next uint64              // lowest number not yet received
	got  map[uint64]struct{} // received numbers above next
	seen uint64              // last_value at the previous re-check
}

func (s *subscriber) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	connected := false
	for ctx.Err() == nil {
		conn, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.db.log.Warn("pgkv: listener cannot connect", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff/2 + rand.N(backoff/2))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		s.mu.Lock()
		missed := connected || s.returned
		s.mu.Unlock()
		connected = true
		s.once.Do(func() { close(s.ready) })
		if missed {
			s.resync()
		}
		err = s.serve(ctx, conn)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.db.log.Warn("pgkv: listener connection lost, reconnecting", "err", err)
	}
}

func (s *subscriber) resync() {
	s.db.resyncs.Add(1)
	s.fn(nil)
}

// connect opens the listener connection, LISTENs and takes the baseline of
// the message numbers.
func (s *subscriber) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, s.db.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, s.db.listen)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, `LISTEN `+channel); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	last, err := s.lastValue(cctx, conn)
	if err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	s.next, s.seen, s.got = last+1, last, map[uint64]struct{}{}
	return conn, nil
}

func (s *subscriber) lastValue(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	var last int64
	var called bool
	if err := conn.QueryRow(ctx, `SELECT last_value, is_called FROM registryd_published`).Scan(&last, &called); err != nil {
		return 0, err
	}
	if !called {
		return 0, nil
	}
	return uint64(last), nil
}

// serve delivers notifications and runs the re-checks until the connection
// fails or ctx ends.
func (s *subscriber) serve(ctx context.Context, conn *pgx.Conn) error {
	recheckAt := time.Now().Add(s.interval)
	for {
		if !time.Now().Before(recheckAt) {
			if err := s.recheck(ctx, conn); err != nil {
				return err
			}
			recheckAt = time.Now().Add(s.interval)
		}
		wctx, cancel := context.WithDeadline(ctx, recheckAt)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
				if conn.IsClosed() {
					return err
				}
				continue // time for the re-check
			}
			return err
		}
		seq, msg, ok := decodeMessage(n.Payload)
		if !ok {
			s.db.log.Warn("pgkv: ignored a foreign notification", "channel", n.Channel)
			continue
		}
		s.received(seq)
		s.fn(msg)
	}
}

func (s *subscriber) received(seq uint64) {
	if seq < s.next {
		return // published before our baseline
	}
	s.got[seq] = struct{}{}
	for {
		if _, ok := s.got[s.next]; !ok {
			break
		}
		delete(s.got, s.next)
		s.next++
	}
}

func (s *subscriber) recheck(ctx context.Context, conn *pgx.Conn) error {
	qctx, cancel := context.WithTimeout(ctx, s.db.timeout)
	defer cancel()
	last, err := s.lastValue(qctx, conn)
	if err != nil {
		return err
	}
	s.db.rechecks.Add(1)
	if s.seen >= s.next {
		// Numbers up to seen were taken at least an interval ago and some
		// never arrived.
		s.db.log.Info("pgkv: notifications lost, resyncing", "missing_from", s.next, "up_to", s.seen)
		for n := range s.got {
			if n <= s.seen {
				delete(s.got, n)
			}
		}
		s.next = s.seen + 1
		for {
			if _, ok := s.got[s.next]; !ok {
				break
			}
			delete(s.got, s.next)
			s.next++
		}
		s.resync()
	}
	s.seen = last
	return nil
}

// lockID maps a lock name to PostgreSQL's 64-bit advisory lock key: FNV-1a
// 64 of the name's bytes, as a signed bigint. A collision of two names
// makes them one lock (more exclusion, never less); migrations use the
// two-int4 key space, which PostgreSQL keeps apart.
func lockID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int64(h.Sum64())
}

// heldLock is a session advisory lock on a connection taken from lockPool
// for the lock's lifetime.
type heldLock struct {
	db   *DB
	conn *pgxpool.Conn
	id   int64
	once sync.Once
}

// unlock releases the lock and gives the connection back; a connection
// that fails to unlock is closed, which releases the lock as well.
func (l *heldLock) unlock() {
	l.once.Do(func() {
		l.db.locksMu.Lock()
		delete(l.db.locks, l)
		l.db.locksMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.db.timeout)
		defer cancel()
		var released bool
		if err := l.conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, l.id).Scan(&released); err != nil || !released {
			// Lost (the connection died: PostgreSQL released it then) or
			// never ours on this session: drop the connection.
			l.conn.Hijack().Close(context.Background())
			return
		}
		l.conn.Release()
	})
}

// Lock takes the cluster lock named key (session advisory lock
// pg_advisory_lock(lockID(key))) on a connection of its own, waiting until
// it is free or ctx ends. The lock lasts as long as that connection: if it
// dies, PostgreSQL releases the lock at once (the holder is not told).
// With MaxLocks locks held or awaited, Lock first waits for one of them.
func (db *DB) Lock(ctx context.Context, key string) (func(), error) {
	conn, err := db.acquireLockConn(ctx)
	if err != nil {
		return nil, err
	}
	id := lockID(key)
	// ctx cancels the wait: the connection sends a cancel request, the
	// backend leaves the lock queue; the connection is then closed rather
	// than reused (a cancel that arrived late could hit a later query).
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
		conn.Hijack().Close(context.Background())
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unavailable("lock", err)
	}
	return db.held(conn, id), nil
}

// TryLock takes the lock named key if it is free (pg_try_advisory_lock).
func (db *DB) TryLock(ctx context.Context, key string) (func(), bool, error) {
	conn, err := db.acquireLockConn(ctx)
	if err != nil {
		return nil, false, err
	}
	id := lockID(key)
	qctx, cancel := context.WithTimeout(ctx, db.timeout)
	defer cancel()
	var ok bool
	if err := conn.QueryRow(qctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil {
		conn.Hijack().Close(context.Background())
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, unavailable("lock", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return db.held(conn, id), true, nil
}

func (db *DB) acquireLockConn(ctx context.Context) (*pgxpool.Conn, error) {
	if db.stopCtx.Err() != nil {
		return nil, errors.New("pgkv: closed")
	}
	conn, err := db.lockPool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unavailable("lock connection", err)
	}
	return conn, nil
}

func (db *DB) held(conn *pgxpool.Conn, id int64) func() {
	l := &heldLock{db: db, conn: conn, id: id}
	db.locksMu.Lock()
	db.locks[l] = struct{}{}
	db.locksMu.Unlock()
	return l.unlock
}
