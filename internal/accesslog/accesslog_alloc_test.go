//go:build !race

package accesslog

import (
	"io"
	"testing"
	"time"
)

// TestAccessLogAllocations: encoding and queueing a line allocates nothing
// (after the first batches exist), in either format. (The race detector
// allocates, hence the tag.) The listener's test checks a logged hit.
func TestAccessLogAllocations(t *testing.T) {
	for _, json := range []bool{false, true} {
		l, err := start(io.Discard, json, nil, nil, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		r := fullRecord()
		r.UA = "quoted \"UA\" with\ttab and é and \xff"
		write := func() { l.Write(&r) }
		for range 1000 {
			write()
		}
		if got := testing.AllocsPerRun(2000, write); got != 0 {
			t.Errorf("json=%v: a line allocates %.1f times", json, got)
		}
		l.Close()
	}
}
