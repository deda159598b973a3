package boltkv

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"registryd/store/kv"
)

func open(t *testing.T) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "t.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestContract covers what boltkv adds to bbolt: a missing bucket is a nil
// kv.Bucket (not a Bucket holding nil), nil values are refused, KeyN and
// sequences pass through, and Stats and Describe report the file.
func TestContract(t *testing.T) {
	db := open(t)
	name := []byte("b")
	err := db.Update(func(tx kv.Tx) error {
		if tx.Bucket(name) != nil {
			t.Error("a missing bucket is not nil")
		}
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		if err := b.Put([]byte("k"), nil); !errors.Is(err, ErrNilValue) {
			t.Errorf("Put(nil) = %v, want ErrNilValue", err)
		}
		if err := b.Put([]byte("k"), []byte{}); err != nil {
			return err
		}
		if v := b.Get([]byte("k")); v == nil || len(v) != 0 {
			t.Errorf("empty value read back as %#v", v)
		}
		if n, err := b.NextSequence(); n != 1 || err != nil {
			t.Errorf("NextSequence = %d, %v", n, err)
		}
		b.SetFillPercent(0.9)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx kv.Tx) error {
		if tx.Writable() {
			t.Error("a View is writable")
		}
		b := tx.Bucket(name)
		if b.KeyN() != 1 || b.Sequence() != 1 {
			t.Errorf("KeyN %d, Sequence %d", b.KeyN(), b.Sequence())
		}
		if k, v := b.Cursor().First(); string(k) != "k" || v == nil {
			t.Errorf("First = %q, %#v", k, v)
		}
		n := 0
		return tx.ForEach(func(_ []byte, b kv.Bucket) error { n++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.Bytes <= 0 || st.OpenTx != 0 {
		t.Errorf("Stats = %+v", st)
	}
	if db.Describe() == "" || filepath.Base(db.Describe()) != "t.db" {
		t.Errorf("Describe = %q", db.Describe())
	}
}

func TestLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Open(path, Options{Timeout: 20 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

// TestReadAllocations pins the adapters' cost: a read through kv allocates
// what bbolt's read allocates, the transaction itself, nothing per bucket,
// key or cursor conversion.
func TestReadAllocations(t *testing.T) {
	db := open(t)
	name, key := []byte("b"), []byte("k")
	if err := db.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		return b.Put(key, []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	read := func(tx kv.Tx) error { got = tx.Bucket(name).Get(key); return nil }
	bolt := testing.AllocsPerRun(100, func() {
		_ = db.db.View(func(tx *bolt.Tx) error { got = tx.Bucket(name).Get(key); return nil })
	})
	through := testing.AllocsPerRun(100, func() { _ = db.View(read) })
	t.Logf("allocations of a read: %.0f on bbolt, %.0f through kv", bolt, through)
	if through > bolt || string(got) != "v" {
		t.Fatalf("a read allocates %.0f times through kv, %.0f on bbolt", through, bolt)
	}
}
