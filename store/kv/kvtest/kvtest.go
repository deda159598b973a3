// Package kvtest is the conformance suite of package kv: every engine runs
// it (boltkv and pgkv call Run from their tests), so store may rely on the
// contract and not on an engine.
package kvtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"registryd/store/kv"
)

// Run runs the suite. open returns a fresh, empty engine for each subtest
// and closes it when that test ends.
func Run(t *testing.T, open func(t testing.TB) kv.DB) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, db kv.DB)
	}{
		{"Buckets", testBuckets},
		{"PutGetDelete", testPutGetDelete},
		{"RefusedWrites", testRefusedWrites},
		{"ReadOnly", testReadOnly},
		{"ClosedTx", testClosedTx},
		{"Order", testOrder},
		{"CursorEnds", testCursorEnds},
		{"CursorPages", testCursorPages},
		{"CursorDelete", testCursorDelete},
		{"CursorDeleteAfterWrites", testCursorDeleteAfterWrites},
		{"CursorSeesOwnWrites", testCursorSeesOwnWrites},
		{"ForEach", testForEach},
		{"Sequences", testSequences},
		{"KeyN", testKeyN},
		{"Rollback", testRollback},
		{"ReadYourWrites", testReadYourWrites},
		{"Isolation", testIsolation},
		{"Snapshot", testSnapshot},
		{"ConcurrentIncrements", testConcurrentIncrements},
		{"LargeValue", testLargeValue},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

var (
	bk    = []byte("b")
	other = []byte("other")
)

func update(t testing.TB, db kv.DB, fn func(tx kv.Tx) error) {
	t.Helper()
	if err := db.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t testing.TB, db kv.DB, fn func(tx kv.Tx) error) {
	t.Helper()
	if err := db.View(fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

// put fills bucket name with the pairs k[i] -> "v"+k[i].
func put(t testing.TB, db kv.DB, name []byte, keys ...[]byte) {
	t.Helper()
	update(t, db, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Put(k, val(k)); err != nil {
				return err
			}
		}
		return nil
	})
}

func val(k []byte) []byte { return append([]byte("v"), k...) }

func get(t testing.TB, db kv.DB, name, key []byte) []byte {
	t.Helper()
	var out []byte
	view(t, db, func(tx kv.Tx) error {
		if b := tx.Bucket(name); b != nil {
			out = bytes.Clone(b.Get(key))
		}
		return nil
	})
	return out
}

func testBuckets(t *testing.T, db kv.DB) {
	view(t, db, func(tx kv.Tx) error {
		if tx.Writable() {
			t.Error("View's tx is writable")
		}
		if b := tx.Bucket(bk); b != nil {
			t.Error("a missing bucket is not nil")
		}
		return nil
	})
	update(t, db, func(tx kv.Tx) error {
		if !tx.Writable() {
			t.Error("Update's tx is not writable")
		}
		for _, n := range [][]byte{[]byte("zeta"), []byte("alpha"), {0xff}, []byte("alpha\x00"), []byte("m")} {
			b, err := tx.CreateBucketIfNotExists(n)
			if err != nil || b == nil {
				return fmt.Errorf("create %q: %v", n, err)
			}
			if tx.Bucket(n) == nil {
				return fmt.Errorf("bucket %q missing in its own tx", n)
			}
		}
		b, err := tx.CreateBucketIfNotExists([]byte("m"))
		if err != nil || b == nil {
			return fmt.Errorf("create again: %v", err)
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	var names []string
	view(t, db, func(tx kv.Tx) error {
		if v := tx.Bucket([]byte("m")).Get([]byte("k")); string(v) != "v" {
			t.Errorf("Get = %q", v)
		}
		return tx.ForEach(func(name []byte, b kv.Bucket) error {
			names = append(names, string(name))
			if b == nil {
				t.Errorf("ForEach: nil bucket %q", name)
			}
			return nil
		})
	})
	want := []string{"alpha", "alpha\x00", "m", "zeta", "\xff"}
	if !slices.Equal(names, want) {
		t.Errorf("buckets %q, want %q", names, want)
	}
	stop := errors.New("stop")
	n := 0
	err := db.View(func(tx kv.Tx) error {
		return tx.ForEach(func([]byte, kv.Bucket) error { n++; return stop })
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("Tx.ForEach stop: err %v after %d calls", err, n)
	}
}

func testPutGetDelete(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("a"), []byte("b"))
	if v := get(t, db, bk, []byte("a")); string(v) != "va" {
		t.Fatalf("Get a = %q", v)
	}
	if v := get(t, db, bk, []byte("zz")); v != nil {
		t.Fatalf("Get missing = %q", v)
	}
	update(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if err := b.Put([]byte("a"), []byte("new")); err != nil {
			return err
		}
		if err := b.Delete([]byte("b")); err != nil {
			return err
		}
		if err := b.Delete([]byte("never")); err != nil {
			return fmt.Errorf("deleting a missing key: %v", err)
		}
		if v := b.Get([]byte("b")); v != nil {
			return fmt.Errorf("Get after Delete in the tx = %q", v)
		}
		return b.Put([]byte("e"), []byte{})
	})
	if v := get(t, db, bk, []byte("a")); string(v) != "new" {
		t.Errorf("overwritten a = %q", v)
	}
	if v := get(t, db, bk, []byte("b")); v != nil {
		t.Errorf("Get after Delete = %q", v)
	}
	if v := get(t, db, bk, []byte("e")); v == nil || len(v) != 0 {
		t.Errorf("empty value read as %#v, want a non-nil empty slice", v)
	}
}

func testRefusedWrites(t *testing.T, db kv.DB) {
	update(t, db, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bk)
		if err != nil {
			return err
		}
		if err := b.Put(nil, []byte("v")); err == nil {
			t.Error("Put with an empty key succeeded")
		}
		if err := b.Put([]byte("k"), nil); err == nil {
			t.Error("Put with a nil value succeeded")
		}
		// A refused write is the caller's error, not the engine's: the
		// transaction goes on.
		return b.Put([]byte("k"), []byte("v"))
	})
	if v := get(t, db, bk, []byte("k")); string(v) != "v" {
		t.Errorf("Get k = %q", v)
	}
}

func testReadOnly(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("k"))
	view(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if err := b.Put([]byte("k"), []byte("x")); !errors.Is(err, kv.ErrTxClosed) {
			t.Errorf("Put in View: %v, want ErrTxClosed", err)
		}
		if err := b.Delete([]byte("k")); !errors.Is(err, kv.ErrTxClosed) {
			t.Errorf("Delete in View: %v, want ErrTxClosed", err)
		}
		if _, err := b.NextSequence(); !errors.Is(err, kv.ErrTxClosed) {
			t.Errorf("NextSequence in View: %v, want ErrTxClosed", err)
		}
		if err := b.SetSequence(3); !errors.Is(err, kv.ErrTxClosed) {
			t.Errorf("SetSequence in View: %v, want ErrTxClosed", err)
		}
		if _, err := tx.CreateBucketIfNotExists(other); err == nil {
			t.Error("CreateBucketIfNotExists in View succeeded")
		}
		c := b.Cursor()
		c.First()
		if err := c.Delete(); !errors.Is(err, kv.ErrTxClosed) {
			t.Errorf("Cursor.Delete in View: %v, want ErrTxClosed", err)
		}
		return nil
	})
	if v := get(t, db, bk, []byte("k")); string(v) != "vk" {
		t.Errorf("Get k = %q", v)
	}
}

func testClosedTx(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("k"))
	var kept kv.Bucket
	update(t, db, func(tx kv.Tx) error { kept = tx.Bucket(bk); return nil })
	if err := kept.Put([]byte("k"), []byte("late")); !errors.Is(err, kv.ErrTxClosed) {
		t.Errorf("Put after Update returned: %v, want ErrTxClosed", err)
	}
	if v := get(t, db, bk, []byte("k")); string(v) != "vk" {
		t.Errorf("Get k = %q", v)
	}
}

// keys in byte order, with the edges bbolt orders bytewise.
var ordered = [][]byte{
	{0x00},
	{0x00, 0x00},
	{0x00, 0x01},
	[]byte("a"),
	[]byte("a\x00"),
	[]byte("a\x00\x00"),
	[]byte("a\x01"),
	[]byte("aa"),
	[]byte("a\x7f"),
	[]byte("a\x80"),
	[]byte("a\xff"),
	[]byte("b"),
	[]byte("\x7f"),
	[]byte("\x80"),
	[]byte("\xfe\xff"),
	[]byte("\xff"),
	[]byte("\xff\x00"),
	[]byte("\xff\xff"),
	[]byte("\xff\xff\xff"),
}

func init() {
	if !slices.IsSortedFunc(ordered, bytes.Compare) {
		panic("kvtest: ordered is not sorted")
	}
}

func collect(c kv.Cursor, first func() ([]byte, []byte), step func() ([]byte, []byte)) [][]byte {
	var out [][]byte
	for k, _ := first(); k != nil; k, _ = step() {
		out = append(out, bytes.Clone(k))
	}
	return out
}

func testOrder(t *testing.T, db kv.DB) {
	// Inserted in an order that is neither sorted nor reversed.
	shuffled := slices.Clone(ordered)
	for i := range shuffled {
		j := (i*7 + 3) % len(shuffled)
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	put(t, db, bk, shuffled...)
	put(t, db, other, []byte("a"), []byte("zz")) // another bucket's keys stay out
	view(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		if got := collect(c, c.First, c.Next); !equalKeys(got, ordered) {
			t.Errorf("forward %q", got)
		}
		rev := slices.Clone(ordered)
		slices.Reverse(rev)
		if got := collect(c, c.Last, c.Prev); !equalKeys(got, rev) {
			t.Errorf("backward %q", got)
		}
		for i, k := range ordered {
			gk, gv := c.Seek(k)
			if !bytes.Equal(gk, k) || !bytes.Equal(gv, val(k)) {
				t.Errorf("Seek(%q) = %q, %q", k, gk, gv)
			}
			// k+0x00 is the smallest key after k: Seek lands on the
			// next stored key.
			gk, _ = c.Seek(append(bytes.Clone(k), 0x00))
			var want []byte
			if i+1 < len(ordered) {
				want = ordered[i+1]
			}
			if !bytes.Equal(gk, want) {
				t.Errorf("Seek(after %q) = %q, want %q", k, gk, want)
			}
		}
		if k, _ := c.Seek([]byte("\xff\xff\xff\xff")); k != nil {
			t.Errorf("Seek past the end = %q", k)
		}
		if k, _ := c.Seek(nil); !bytes.Equal(k, ordered[0]) {
			t.Errorf("Seek(nil) = %q", k)
		}
		// Mixed directions.
		c.Seek([]byte("aa"))
		if k, _ := c.Prev(); string(k) != "a\x01" {
			t.Errorf("Prev after Seek(aa) = %q", k)
		}
		if k, _ := c.Next(); string(k) != "aa" {
			t.Errorf("Next = %q", k)
		}
		if k, _ := c.Next(); string(k) != "a\x7f" {
			t.Errorf("Next = %q", k)
		}
		return nil
	})
}

func equalKeys(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

func testCursorEnds(t *testing.T, db kv.DB) {
	put(t, db, bk)
	view(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		if k, v := c.First(); k != nil || v != nil {
			t.Errorf("First of an empty bucket = %q", k)
		}
		if k, _ := c.Last(); k != nil {
			t.Errorf("Last of an empty bucket = %q", k)
		}
		if k, _ := c.Seek([]byte("a")); k != nil {
			t.Errorf("Seek in an empty bucket = %q", k)
		}
		return nil
	})
	put(t, db, bk, []byte("a"), []byte("b"), []byte("c"))
	view(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		c.First()
		if k, _ := c.Prev(); k != nil {
			t.Errorf("Prev from First = %q", k)
		}
		c.Last()
		if k, _ := c.Next(); k != nil {
			t.Errorf("Next from Last = %q", k)
		}
		if k, _ := c.Next(); k != nil {
			t.Errorf("Next again past the end = %q", k)
		}
		if k, _ := c.Seek([]byte("zz")); k != nil {
			t.Errorf("Seek past the end = %q", k)
		}
		if k, _ := c.Seek([]byte("0")); string(k) != "a" {
			t.Errorf("Seek before the first = %q", k)
		}
		if k, _ := c.Seek([]byte("bb")); string(k) != "c" {
			t.Errorf("Seek(bb) = %q", k)
		}
		if k, _ := c.Last(); string(k) != "c" {
			t.Errorf("Last = %q", k)
		}
		return nil
	})
}

func key(i int) []byte { return binary.BigEndian.AppendUint32([]byte("k"), uint32(i)) }

// testCursorPages walks far enough to cross any engine's page or batch.
func testCursorPages(t *testing.T, db kv.DB) {
	const n = 1500
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = key(i)
	}
	put(t, db, bk, keys...)
	view(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		if got := collect(c, c.First, c.Next); !equalKeys(got, keys) {
			t.Errorf("forward walk: %d keys", len(got))
		}
		got := collect(c, c.Last, c.Prev)
		slices.Reverse(got)
		if !equalKeys(got, keys) {
			t.Errorf("backward walk: %d keys", len(got))
		}
		// Seek into the middle, then go back and forth over boundaries.
		i := 700
		k, _ := c.Seek(keys[i])
		for step := range 600 {
			back := step%7 == 3 || step%11 == 5
			if back {
				k, _ = c.Prev()
				i--
			} else {
				k, _ = c.Next()
				i++
			}
			if !bytes.Equal(k, keys[i]) {
				t.Fatalf("step %d: at %q, want %q", step, k, keys[i])
			}
		}
		// Walk backwards from a Seek well into the bucket.
		c.Seek(keys[1200])
		for j := 1199; j >= 900; j-- {
			if k, _ := c.Prev(); !bytes.Equal(k, keys[j]) {
				t.Fatalf("Prev: at %q, want %q", k, keys[j])
			}
		}
		return nil
	})
}

// testCursorDelete deletes every other key during a walk, and uses the
// "seek, delete, next" pattern.
func testCursorDelete(t *testing.T, db kv.DB) {
	const n = 600
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = key(i)
	}
	put(t, db, bk, keys...)
	update(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		i := 0
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if !bytes.Equal(k, keys[i]) {
				return fmt.Errorf("walk at %q, want %q", k, keys[i])
			}
			if i%2 == 0 {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			i++
		}
		if i != n {
			return fmt.Errorf("walked %d keys, want %d", i, n)
		}
		return nil
	})
	var rest [][]byte
	for i := 1; i < n; i += 2 {
		rest = append(rest, keys[i])
	}
	view(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		if got := collect(c, c.First, c.Next); !equalKeys(got, rest) {
			t.Errorf("after deleting the even keys: %d keys left", len(got))
		}
		return nil
	})
	// Seek, delete the key found, Next: the key after it.
	update(t, db, func(tx kv.Tx) error {
		c := tx.Bucket(bk).Cursor()
		for i := 1; i+2 < n; i += 100 {
			k, _ := c.Seek(keys[i])
			if !bytes.Equal(k, keys[i]) {
				return fmt.Errorf("Seek %q = %q", keys[i], k)
			}
			if err := c.Delete(); err != nil {
				return err
			}
			if k, _ := c.Next(); !bytes.Equal(k, keys[i+2]) {
				return fmt.Errorf("Next after Delete of %q = %q, want %q", keys[i], k, keys[i+2])
			}
			if v := tx.Bucket(bk).Get(keys[i]); v != nil {
				return fmt.Errorf("deleted key still there")
			}
		}
		// Delete the last key, then Next: the end.
		k, _ := c.Last()
		if err := c.Delete(); err != nil {
			return err
		}
		if k2, _ := c.Next(); k2 != nil {
			return fmt.Errorf("Next after deleting the last key %q = %q", k, k2)
		}
		return nil
	})
}

// testCursorDeleteAfterWrites deletes during a walk of a bucket that the
// same transaction modified first (an engine that buffers its writes must
// still step to the key after the deleted one).
func testCursorDeleteAfterWrites(t *testing.T, db kv.DB) {
	const n = 300
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = key(i)
	}
	put(t, db, bk, keys...)
	update(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		for i := 0; i < n; i += 3 {
			if err := b.Put(keys[i], []byte("changed")); err != nil {
				return err
			}
		}
		c := b.Cursor()
		i := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if !bytes.Equal(k, keys[i]) {
				return fmt.Errorf("walk at %q, want %q", k, keys[i])
			}
			if i%3 == 0 && string(v) != "changed" {
				return fmt.Errorf("walk read %q = %q, not the tx's own write", k, v)
			}
			if i%2 == 0 {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			i++
		}
		if i != n {
			return fmt.Errorf("walked %d keys, want %d", i, n)
		}
		return nil
	})
	view(t, db, func(tx kv.Tx) error {
		if n2 := tx.Bucket(bk).KeyN(); n2 != n/2 {
			t.Errorf("KeyN = %d, want %d", n2, n/2)
		}
		return nil
	})
}

// testCursorSeesOwnWrites: a cursor repositioned after writes sees them.
func testCursorSeesOwnWrites(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("a"), []byte("c"), []byte("e"))
	update(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		c := b.Cursor()
		c.First() // a page may be prefetched here
		if err := b.Put([]byte("b"), []byte("vb")); err != nil {
			return err
		}
		if err := b.Delete([]byte("c")); err != nil {
			return err
		}
		if err := b.Put([]byte("f"), []byte("vf")); err != nil {
			return err
		}
		got := collect(c, c.First, c.Next)
		want := [][]byte{[]byte("a"), []byte("b"), []byte("e"), []byte("f")}
		if !equalKeys(got, want) {
			return fmt.Errorf("walk after writes: %q, want %q", got, want)
		}
		if k, _ := c.Seek([]byte("c")); string(k) != "e" {
			return fmt.Errorf("Seek(c) after deleting c = %q", k)
		}
		if k, _ := c.Prev(); string(k) != "b" {
			return fmt.Errorf("Prev = %q", k)
		}
		return nil
	})
}

func testForEach(t *testing.T, db kv.DB) {
	put(t, db, bk, ordered...)
	var got [][]byte
	view(t, db, func(tx kv.Tx) error {
		return tx.Bucket(bk).ForEach(func(k, v []byte) error {
			if !bytes.Equal(v, val(k)) {
				t.Errorf("ForEach %q = %q", k, v)
			}
			got = append(got, bytes.Clone(k))
			return nil
		})
	})
	if !equalKeys(got, ordered) {
		t.Errorf("ForEach keys %q", got)
	}
	stop := errors.New("stop")
	n := 0
	err := db.View(func(tx kv.Tx) error {
		return tx.Bucket(bk).ForEach(func(k, v []byte) error {
			n++
			if n == 3 {
				return stop
			}
			return nil
		})
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Errorf("ForEach stop: err %v after %d calls", err, n)
	}
}

func testSequences(t *testing.T, db kv.DB) {
	put(t, db, bk)
	update(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if s := b.Sequence(); s != 0 {
			return fmt.Errorf("fresh Sequence = %d", s)
		}
		for want := uint64(1); want <= 3; want++ {
			if s, err := b.NextSequence(); err != nil || s != want {
				return fmt.Errorf("NextSequence = %d, %v; want %d", s, err, want)
			}
		}
		if s := b.Sequence(); s != 3 {
			return fmt.Errorf("Sequence = %d", s)
		}
		return nil
	})
	view(t, db, func(tx kv.Tx) error {
		if s := tx.Bucket(bk).Sequence(); s != 3 {
			t.Errorf("committed Sequence = %d", s)
		}
		return nil
	})
	update(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if err := b.SetSequence(100); err != nil {
			return err
		}
		if s, err := b.NextSequence(); err != nil || s != 101 {
			return fmt.Errorf("NextSequence after SetSequence(100) = %d, %v", s, err)
		}
		return nil
	})
	const big = 1<<63 + 5 // above int64: the whole uint64 range survives
	update(t, db, func(tx kv.Tx) error { return tx.Bucket(bk).SetSequence(big) })
	view(t, db, func(tx kv.Tx) error {
		if s := tx.Bucket(bk).Sequence(); s != big {
			t.Errorf("Sequence = %d, want %d", s, uint64(big))
		}
		return nil
	})
	// Sequences are per bucket.
	put(t, db, other)
	update(t, db, func(tx kv.Tx) error {
		if s, err := tx.Bucket(other).NextSequence(); err != nil || s != 1 {
			return fmt.Errorf("other bucket's NextSequence = %d, %v", s, err)
		}
		return nil
	})
}

func testKeyN(t *testing.T, db kv.DB) {
	put(t, db, bk, ordered...)
	put(t, db, other, []byte("x"))
	update(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if n := b.KeyN(); n != len(ordered) {
			return fmt.Errorf("KeyN = %d, want %d", n, len(ordered))
		}
		b.Delete(ordered[0])
		b.Put([]byte("new"), []byte("v"))
		b.Put(ordered[1], []byte("overwritten"))
		if n := b.KeyN(); n != len(ordered) {
			return fmt.Errorf("KeyN in the tx after -1 +1 = %d, want %d", n, len(ordered))
		}
		b.Delete(ordered[2])
		if n := b.KeyN(); n != len(ordered)-1 {
			return fmt.Errorf("KeyN in the tx = %d, want %d", n, len(ordered)-1)
		}
		return nil
	})
	view(t, db, func(tx kv.Tx) error {
		if n := tx.Bucket(bk).KeyN(); n != len(ordered)-1 {
			t.Errorf("committed KeyN = %d", n)
		}
		if n := tx.Bucket(other).KeyN(); n != 1 {
			t.Errorf("other KeyN = %d", n)
		}
		return nil
	})
}

func testRollback(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("keep"))
	update(t, db, func(tx kv.Tx) error { _, err := tx.Bucket(bk).NextSequence(); return err })
	boom := errors.New("boom")
	err := db.Update(func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		b.Put([]byte("new"), []byte("v"))
		b.Delete([]byte("keep"))
		b.NextSequence()
		if _, err := tx.CreateBucketIfNotExists(other); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want the function's error", err)
	}
	view(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if v := b.Get([]byte("new")); v != nil {
			t.Error("a rolled back Put is visible")
		}
		if v := b.Get([]byte("keep")); v == nil {
			t.Error("a rolled back Delete is visible")
		}
		if s := b.Sequence(); s != 1 {
			t.Errorf("Sequence after rollback = %d, want 1", s)
		}
		if tx.Bucket(other) != nil {
			t.Error("a rolled back bucket exists")
		}
		return nil
	})
	// A later transaction creates it afresh.
	put(t, db, other, []byte("x"))
	if v := get(t, db, other, []byte("x")); string(v) != "vx" {
		t.Errorf("Get = %q", v)
	}
}

func testReadYourWrites(t *testing.T, db kv.DB) {
	update(t, db, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bk)
		if err != nil {
			return err
		}
		for i, k := range ordered {
			if err := b.Put(k, val(k)); err != nil {
				return err
			}
			if v := b.Get(k); !bytes.Equal(v, val(k)) {
				return fmt.Errorf("Get(%q) after Put = %q", k, v)
			}
			if n := b.KeyN(); n != i+1 {
				return fmt.Errorf("KeyN = %d, want %d", n, i+1)
			}
		}
		c := b.Cursor()
		if got := collect(c, c.First, c.Next); !equalKeys(got, ordered) {
			return fmt.Errorf("walk of the tx's own writes: %q", got)
		}
		// Through another handle of the same bucket.
		if v := tx.Bucket(bk).Get(ordered[3]); !bytes.Equal(v, val(ordered[3])) {
			return fmt.Errorf("Get through another handle = %q", v)
		}
		return nil
	})
}

// testIsolation: an uncommitted write is invisible outside its transaction.
func testIsolation(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("k"))
	outside := func() (v []byte, err error) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			err = db.View(func(tx kv.Tx) error {
				v = bytes.Clone(tx.Bucket(bk).Get([]byte("k")))
				return nil
			})
		}()
		<-done
		return v, err
	}
	update(t, db, func(tx kv.Tx) error {
		if err := tx.Bucket(bk).Put([]byte("k"), []byte("uncommitted")); err != nil {
			return err
		}
		v, err := outside()
		if err != nil {
			return err
		}
		if string(v) != "vk" {
			t.Errorf("a View outside the Update read %q", v)
		}
		return nil
	})
	if v := get(t, db, bk, []byte("k")); string(v) != "uncommitted" {
		t.Errorf("after commit: %q", v)
	}
}

// testSnapshot: a View sees one snapshot while an Update commits.
func testSnapshot(t *testing.T, db kv.DB) {
	put(t, db, bk, []byte("k"), []byte("x"))
	view(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if v := b.Get([]byte("k")); string(v) != "vk" {
			return fmt.Errorf("Get = %q", v)
		}
		var uerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			uerr = db.Update(func(tx kv.Tx) error {
				b := tx.Bucket(bk)
				if err := b.Put([]byte("k"), []byte("changed")); err != nil {
					return err
				}
				if err := b.Put([]byte("added"), []byte("v")); err != nil {
					return err
				}
				if _, err := b.NextSequence(); err != nil {
					return err
				}
				return b.Delete([]byte("x"))
			})
		}()
		<-done
		if uerr != nil {
			return fmt.Errorf("concurrent Update: %v", uerr)
		}
		if v := b.Get([]byte("k")); string(v) != "vk" {
			t.Errorf("View saw a concurrent commit: k = %q", v)
		}
		if v := b.Get([]byte("x")); string(v) != "vx" {
			t.Errorf("View saw a concurrent delete: x = %q", v)
		}
		if n := b.KeyN(); n != 2 {
			t.Errorf("KeyN = %d, want 2", n)
		}
		if s := b.Sequence(); s != 0 {
			t.Errorf("Sequence = %d, want 0", s)
		}
		c := b.Cursor()
		if got := collect(c, c.First, c.Next); !equalKeys(got, [][]byte{[]byte("k"), []byte("x")}) {
			t.Errorf("walk = %q", got)
		}
		return nil
	})
	if v := get(t, db, bk, []byte("k")); string(v) != "changed" {
		t.Errorf("a later View: %q", v)
	}
}

// testConcurrentIncrements: read-modify-write of one key from several
// goroutines loses no update (the transactions are serializable).
func testConcurrentIncrements(t *testing.T, db kv.DB) {
	const workers, each = 6, 15
	put(t, db, bk)
	ctr := []byte("counter")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				err := db.Update(func(tx kv.Tx) error {
					b := tx.Bucket(bk)
					var n uint64
					if v := b.Get(ctr); v != nil {
						n = binary.BigEndian.Uint64(v)
					}
					if _, err := b.NextSequence(); err != nil {
						return err
					}
					return b.Put(ctr, binary.BigEndian.AppendUint64(nil, n+1))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Update: %v", err)
	}
	view(t, db, func(tx kv.Tx) error {
		b := tx.Bucket(bk)
		if n := binary.BigEndian.Uint64(b.Get(ctr)); n != workers*each {
			t.Errorf("counter = %d, want %d", n, workers*each)
		}
		if s := b.Sequence(); s != workers*each {
			t.Errorf("sequence = %d, want %d", s, workers*each)
		}
		return nil
	})
}

func testLargeValue(t *testing.T, db kv.DB) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	big[0], big[len(big)-1] = 0x00, 0xff
	update(t, db, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bk)
		if err != nil {
			return err
		}
		return b.Put([]byte("big"), big)
	})
	if v := get(t, db, bk, []byte("big")); !bytes.Equal(v, big) {
		t.Errorf("1 MiB value read back as %d bytes", len(v))
	}
}
