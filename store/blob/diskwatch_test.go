package blob

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"registryd/internal/testclock"
)

func TestIsDiskFull(t *testing.T) {
	for _, err := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG,
		&fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, fmt.Errorf("blobs: fsync: %w", syscall.ENOSPC)} {
		if !IsDiskFull(err) {
			t.Errorf("%v is not a full disk", err)
		}
	}
	for _, err := range []error{nil, syscall.EIO, errors.New("no space"), fs.ErrNotExist} {
		if IsDiskFull(err) {
			t.Errorf("%v is a full disk", err)
		}
	}
}

// TestDiskWatch: Reserve keeps the reserve (1% of the volume) free, promises
// bytes to fills in progress, and a write that failed for want of space
// holds fills off the disk until the hold ends or the volume has more room.
func TestDiskWatch(t *testing.T) {
	e := newBlobEnv(t)
	var mu sync.Mutex
	space := Space{Free: 50 << 20, Total: 1 << 30} // reserve: 10.24 MiB
	calls := 0
	e.faults.SetSpaceProbe(func() (Space, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return space, nil
	})
	set := func(free int64) {
		mu.Lock()
		space.Free = free
		mu.Unlock()
		e.faults.SetSpaceProbe(func() (Space, error) { mu.Lock(); defer mu.Unlock(); calls++; return space, nil })
	}
	clock := testclock.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	e.b.disk.watch.now = clock.Now

	if st := e.b.DiskStatus(); !st.Filling || st.Free != 50<<20 || st.Total != 1<<30 {
		t.Fatalf("status %+v", st)
	}
	rel1, ok := e.b.Reserve(30 << 20)
	if !ok {
		t.Fatal("30 MiB refused with 50 MiB free")
	}
	if _, ok := e.b.Reserve(10 << 20); ok {
		t.Fatal("10 MiB more promised past the reserve")
	}
	rel1()
	rel1() // once only
	if _, ok := e.b.Reserve(39 << 20); !ok {
		t.Fatal("the promise was not given back")
	}
	// One statfs answers for a second.
	before := calls
	for range 10 {
		e.b.DiskStatus()
	}
	if calls != before {
		t.Fatalf("%d statfs calls within a second", calls-before)
	}

	set(8 << 20)
	st := e.b.DiskStatus()
	if st.Filling || st.Reason != "data volume full: 8.0 MiB free of 1.0 GiB, 10.2 MiB kept in reserve" {
		t.Fatalf("status %+v", st)
	}
	if _, ok := e.b.Reserve(-1); ok {
		t.Fatal("a body of unknown length may be written on a full volume")
	}

	// A quota: statfs says 500 MiB free, the write failed all the same.
	set(500 << 20)
	e.b.NoteDiskFull()
	if st := e.b.DiskStatus(); st.Filling || st.Reason != "a write to the data volume failed for want of space 0s ago (500.0 MiB free)" {
		t.Fatalf("status %+v", st)
	}
	clock.Advance(fullHold - time.Second)
	e.faults.SetSpaceProbe(func() (Space, error) { mu.Lock(); defer mu.Unlock(); return space, nil })
	if _, ok := e.b.Reserve(1); ok {
		t.Fatal("filling during the hold")
	}
	clock.Advance(time.Second)
	if _, ok := e.b.Reserve(1); !ok {
		t.Fatal("not filling after the hold")
	}
	// Space that returns ends the hold at once.
	e.b.NoteDiskFull()
	set(600 << 20)
	if _, ok := e.b.Reserve(1); !ok {
		t.Fatal("not filling once the volume has more room")
	}
}

// TestWriteFaultAndDetach: a write that the volume cannot take fails with
// ENOSPC after what fits; Detach then gives the digests of what was written
// to go on with, and removes the temp file.
func TestWriteFaultAndDetach(t *testing.T) {
	e := newBlobEnv(t)
	e.faults.ENOSPCAfter(1000)
	w, err := e.b.Create()
	noErr(t, err)
	body := patterned(3000)
	n, err := w.Write(body[:600])
	if n != 600 || err != nil {
		t.Fatalf("%d, %v", n, err)
	}
	n, err = w.Write(body[600:1500])
	if n != 400 || !IsDiskFull(err) {
		t.Fatalf("%d, %v", n, err)
	}
	rf, err := os.Open(w.Name())
	noErr(t, err)
	defer rf.Close()
	sums, err := w.Detach()
	noErr(t, err)
	if _, err := os.Stat(w.name); w.name != "" || err == nil {
		t.Fatal("the temp file is still there")
	}
	if ents, _ := os.ReadDir(e.b.TempDir()); len(ents) != 0 {
		t.Fatalf("%d files in tmp", len(ents))
	}
	// The descriptor opened before still reads what was written.
	got := make([]byte, 1000)
	if _, err := rf.ReadAt(got, 0); err != nil || string(got) != string(body[:1000]) {
		t.Fatalf("read back: %v", err)
	}
	for _, h := range sums {
		h.Write(body[1000:])
	}
	if d := SumHashes(sums, 3000); d != wantDigests(body) {
		t.Fatalf("digests %+v", d)
	}
	e.faults.NoWriteFault()
	w2, err := e.b.Create()
	noErr(t, err)
	if _, err := w2.Write(body); err != nil {
		t.Fatal(err)
	}
	w2.Abort()
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 12 << 20: "12.0 MiB",
		3<<30 + 1<<29: "3.5 GiB", 2 << 40: "2.0 TiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
