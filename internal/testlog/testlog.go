// Package testlog is a slog handler for tests: it keeps every record as one
// line, "LEVEL message key=value ...", for the test to read.
package testlog

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Recorder keeps the records it handles; use it as slog.New(&Recorder{}).
type Recorder struct {
	mu    sync.Mutex
	lines []string
}

func (h *Recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *Recorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *Recorder) WithGroup(string) slog.Handler            { return h }

func (h *Recorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, line)
	return nil
}

// Lines returns the lines so far.
func (h *Recorder) Lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lines)
}
