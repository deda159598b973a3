package pgkv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"registryd/internal/testsvc"
	"registryd/store/kv"
)

// The guards that hold without SERIALIZABLE's conflict detection (a server
// anomaly, a bug of the serializable checks): the write transactions run
// at REPEATABLE READ (snapshot isolation) here, and two of them are
// interleaved by hand. Each case ends as some serial order would have it,
// the interrupted transaction running again (docs/scale-out.md, "What
// guards each invariant").
func TestGuardsWithoutSerializable(t *testing.T) {
	pg := testsvc.Postgres(t)
	k := []byte("k")
	// setup opens a database at snapshot isolation with k = v (none when
	// v is nil).
	setup := func(t *testing.T, v []byte) *DB {
		db := openDB(t, Options{DSN: pg.NewDatabase(t)})
		db.writeOpts = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadWrite}
		if err := db.Update(func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bk)
			if err != nil || v == nil {
				return err
			}
			return b.Put(k, v)
		}); err != nil {
			t.Fatal(err)
		}
		return db
	}
	// interleave runs first, whose first attempt stops after its reads
	// (at pause) while second runs and commits, and returns first's error
	// and how often it ran.
	interleave := func(t *testing.T, db *DB, first func(tx kv.Tx, pause func()) error, second func(tx kv.Tx) error) (error, int) {
		t.Helper()
		var attempts atomic.Int32
		read, resume := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- db.Update(func(tx kv.Tx) error {
				n := attempts.Add(1)
				return first(tx, func() {
					if n == 1 {
						close(read)
						<-resume
					}
				})
			})
		}()
		select {
		case <-read:
		case err := <-done:
			t.Fatalf("the first transaction ended before its pause: %v", err)
		}
		if err := db.Update(second); err != nil {
			close(resume)
			t.Fatalf("the second transaction: %v", err)
		}
		close(resume)
		return <-done, int(attempts.Load())
	}
	get := func(t *testing.T, db *DB) []byte {
		var v []byte
		if err := db.View(func(tx kv.Tx) error { v = bytes.Clone(tx.Bucket(bk).Get(k)); return nil }); err != nil {
			t.Fatal(err)
		}
		return v
	}

	// A key read and then deleted by another transaction is not brought
	// back by this one's write: a token revoked (written) while its user
	// is deleted, an entry touched while it is deleted.
	t.Run("a deleted key is not resurrected", func(t *testing.T) {
		db := setup(t, []byte("v1"))
		err, n := interleave(t, db, func(tx kv.Tx, pause func()) error {
			b := tx.Bucket(bk)
			v := b.Get(k)
			pause()
			if v == nil {
				return nil // gone: nothing to update
			}
			return b.Put(k, append(bytes.Clone(v), '+'))
		}, func(tx kv.Tx) error { return tx.Bucket(bk).Delete(k) })
		if err != nil || n != 2 {
			t.Fatalf("the updating transaction: %v after %d attempts; want a retry (2)", err, n)
		}
		if v := get(t, db); v != nil {
			t.Fatalf("k = %q after the delete committed; want it deleted", v)
		}
	})

	// The same for a key found by a cursor (a walk that rewrites what it
	// finds).
	t.Run("a deleted key found by a cursor is not resurrected", func(t *testing.T) {
		db := setup(t, []byte("v1"))
		err, n := interleave(t, db, func(tx kv.Tx, pause func()) error {
			b := tx.Bucket(bk)
			key, v := b.Cursor().Seek(k)
			pause()
			if !bytes.Equal(key, k) {
				return nil
			}
			return b.Put(k, append(bytes.Clone(v), '+'))
		}, func(tx kv.Tx) error { return tx.Bucket(bk).Delete(k) })
		if err != nil || n != 2 {
			t.Fatalf("the updating transaction: %v after %d attempts; want a retry (2)", err, n)
		}
		if v := get(t, db); v != nil {
			t.Fatalf("k = %q after the delete committed; want it deleted", v)
		}
	})

	// A key read as absent and created meanwhile by another transaction
	// is not overwritten: two nodes creating one cache entry, one group
	// path, one blob reference.
	t.Run("a concurrent create is not overwritten", func(t *testing.T) {
		db := setup(t, nil)
		errExists := errors.New("exists")
		err, n := interleave(t, db, func(tx kv.Tx, pause func()) error {
			b := tx.Bucket(bk)
			v := b.Get(k)
			pause()
			if v != nil {
				return errExists
			}
			return b.Put(k, []byte("mine"))
		}, func(tx kv.Tx) error { return tx.Bucket(bk).Put(k, []byte("theirs")) })
		if !errors.Is(err, errExists) || n != 2 {
			t.Fatalf("the creating transaction: %v after %d attempts; want errExists on a retry (2)", err, n)
		}
		if v := get(t, db); string(v) != "theirs" {
			t.Fatalf("k = %q; want the concurrent create's", v)
		}
	})

	// A read-modify-write (a reference count) loses no update.
	t.Run("no lost update", func(t *testing.T) {
		db := setup(t, binary.BigEndian.AppendUint64(nil, 1))
		add := func(tx kv.Tx, pause func()) error {
			b := tx.Bucket(bk)
			c := binary.BigEndian.Uint64(b.Get(k))
			pause()
			return b.Put(k, binary.BigEndian.AppendUint64(nil, c+1))
		}
		err, n := interleave(t, db, add, func(tx kv.Tx) error { return add(tx, func() {}) })
		if err != nil || n != 2 {
			t.Fatalf("the first increment: %v after %d attempts; want a retry (2)", err, n)
		}
		if c := binary.BigEndian.Uint64(get(t, db)); c != 3 {
			t.Fatalf("count = %d after two increments of 1; want 3", c)
		}
	})
}
