package sbomtest

import (
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"registryd/internal/every"
)

// HeapPeak samples the heap while an upload runs. It reads runtime/metrics,
// which does not stop the world, every 200µs.
type HeapPeak struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	// inuse is the peak of heap spans in use (objects, live or not yet
	// swept, and the free space inside their spans): runtime.MemStats.HeapInuse.
	inuse uint64
	// mapped is the peak of heap memory obtained from the OS and not
	// returned: what the heap adds to RSS.
	mapped uint64
}

var heapSamples = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

func readHeap(s []rtmetrics.Sample) (inuse, mapped uint64) {
	rtmetrics.Read(s)
	inuse = s[0].Value.Uint64() + s[1].Value.Uint64()
	return inuse, inuse + s[2].Value.Uint64()
}

// StartHeapPeak settles the heap, then samples until stop. Peaks are
// reported above the settled baseline.
func StartHeapPeak() (*HeapPeak, uint64, uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	s := make([]rtmetrics.Sample, len(heapSamples))
	for i, n := range heapSamples {
		s[i].Name = n
	}
	baseInuse, baseMapped := readHeap(s)
	p := &HeapPeak{stop: make(chan struct{}), done: make(chan struct{}), inuse: baseInuse, mapped: baseMapped}
	go func() {
		defer close(p.done)
		every.TickNow(p.stop, 200*time.Microsecond, func() {
			in, mp := readHeap(s)
			p.mu.Lock()
			p.inuse, p.mapped = max(p.inuse, in), max(p.mapped, mp)
			p.mu.Unlock()
		})
	}()
	return p, baseInuse, baseMapped
}

func (p *HeapPeak) End() (inuse, mapped uint64) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inuse, p.mapped
}

// PeakRSS resets the kernel's high-water mark of this process (Linux
// clear_refs 5) and returns a function that reports how far RSS rose above
// where it stood. ok is false where the kernel does not offer it.
func PeakRSS() (rise func() int64, ok bool) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return nil, false
	}
	base, ok := procStatus("VmRSS")
	if !ok {
		return nil, false
	}
	return func() int64 {
		hwm, _ := procStatus("VmHWM")
		return hwm - base
	}, true
}

func procStatus(field string) (int64, bool) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
