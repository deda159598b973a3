package boltkv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
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

// TestAppendMostly: the buckets named in Options.AppendMostly have bbolt's
// fill percent at 0.95 in every write transaction, however they are
// opened; the others keep bbolt's default.
func TestAppendMostly(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "t.db"), Options{AppendMostly: [][]byte{[]byte("log")}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fill := func(b kv.Bucket) float64 { return b.(Bucket).b.FillPercent }
	for range 2 { // created, then opened again
		err = db.Update(func(tx kv.Tx) error {
			log, err := tx.CreateBucketIfNotExists([]byte("log"))
			if err != nil {
				return err
			}
			other, err := tx.CreateBucketIfNotExists([]byte("other"))
			if err != nil {
				return err
			}
			if fill(log) != appendFillPercent || fill(tx.Bucket([]byte("log"))) != appendFillPercent {
				t.Errorf("log: fill %v, want %v", fill(log), appendFillPercent)
			}
			if fill(other) != bolt.DefaultFillPercent {
				t.Errorf("other: fill %v, want bbolt's default", fill(other))
			}
			return tx.ForEach(func(name []byte, b kv.Bucket) error {
				if string(name) == "log" && fill(b) != appendFillPercent {
					t.Errorf("ForEach log: fill %v", fill(b))
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
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

// TestFreelistWrittenByCloseOnly: commits leave the freelist unwritten (a
// fresh contiguous run per commit made the file grow under churn), Close
// writes it so a clean restart reads it back, and a copy taken while open
// (what a crash leaves) opens with its free pages rebuilt from the tree.
func TestFreelistWrittenByCloseOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	name, val := []byte("b"), make([]byte, 500)
	for round := range 2 { // fill, then delete most: free pages
		err := db.Update(func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			for i := range 5000 {
				k := []byte(fmt.Sprintf("k%06d", i))
				if round == 0 {
					err = b.Put(k, val)
				} else if i%10 != 0 {
					err = b.Delete(k)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The deleting commit's pages are pending until the next writer starts.
	if err := db.Update(func(kv.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	free := db.Stats().FreeBytes
	if free == 0 {
		t.Fatal("no free pages after deleting 90% of the keys")
	}
	if freelistWritten(t, path) {
		t.Fatal("a commit wrote the freelist")
	}
	crash := filepath.Join(dir, "crash.db")
	if err := db.CopyFile(crash); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !freelistWritten(t, path) {
		t.Fatal("Close did not write the freelist")
	}
	for _, p := range []string{path, crash} {
		db, err := Open(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		st := db.Stats()
		var n int
		err = db.View(func(tx kv.Tx) error { n = int(tx.Bucket(name).KeyN()); return nil })
		if err != nil || n != 500 {
			t.Fatalf("%s: %d keys, %v; want 500", p, n, err)
		}
		if st.FreeBytes < free/2 { // the last commits may have taken a few pages
			t.Fatalf("%s: %d bytes free after reopening, %d before", p, st.FreeBytes, free)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// freelistWritten reads the newer of the file's two meta pages and reports
// whether it points at a freelist page (bbolt's page header is 16 bytes;
// the meta then holds magic, version, page size and flags (4 bytes each),
// the root bucket (16), the freelist's page id, the high-water mark and the
// transaction id (8 each), little-endian on the platforms we build for).
func freelistWritten(t *testing.T, path string) bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(binary.LittleEndian.Uint32(raw[16+8:]))
	var freelist, txid uint64
	for _, off := range []int{0, pageSize} {
		m := raw[off+16:]
		if tx := binary.LittleEndian.Uint64(m[48:]); tx >= txid {
			txid, freelist = tx, binary.LittleEndian.Uint64(m[32:])
		}
	}
	return freelist != ^uint64(0)
}
