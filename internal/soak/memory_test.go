package soak

import (
	"os"
	"testing"
	"time"
)

// TestMemoryHalves: the halves cover the load after settle only, split at
// the middle of what remains; samples without an RSS reading, before settle
// or after the load do not count.
func TestMemoryHalves(t *testing.T) {
	var s []Sample
	for sec := 0; sec < 100; sec++ {
		rss := 500.0 // the ramp: left out
		if sec >= 20 {
			rss = 100
			if sec >= 60 {
				rss = 110
			}
		}
		s = append(s, Sample{At: float64(sec), RSS: rss, Anon: rss - 40, File: 40, HeapInuse: rss / 2})
	}
	s = append(s, Sample{At: 50.5}, Sample{At: 150, RSS: 9999}) // no reading; after the load
	h, ok := memoryHalves(s, 20*time.Second, 100*time.Second)
	if !ok {
		t.Fatal("no halves")
	}
	if h.settle != 20 || h.first.RSS != 100 || h.second.RSS != 110 || h.first.Anon != 60 || h.second.File != 40 || h.second.HeapInuse != 55 {
		t.Fatalf("halves %+v, want 100 then 110 MB after 20 s", h)
	}
	if whole, _ := memoryHalves(s, 0, 100*time.Second); whole.first.RSS <= 100 {
		t.Fatalf("without settle the ramp must count: first half %v", whole.first.RSS)
	}
	if _, ok := memoryHalves(s[:30], 20*time.Second, 100*time.Second); ok {
		t.Fatal("halves reported with an empty second half")
	}
}

// TestReadMemory: this process's own status has an RSS made of its parts.
func TestReadMemory(t *testing.T) {
	m := ReadMemory(os.Getpid())
	if m.RSS <= 0 || m.Anon <= 0 || m.Anon+m.File+m.Shmem != m.RSS {
		t.Fatalf("memory %+v: want RSS = anon + file + shmem, all read", m)
	}
	if got := ReadMemory(-1); got != (Memory{}) {
		t.Fatalf("a missing process read as %+v", got)
	}
}
