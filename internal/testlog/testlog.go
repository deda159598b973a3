// Package testlog is what tests read logs through: a slog handler that keeps
// every record as one line, "LEVEL message key=value ...", and a buffer a
// log writer writes to while the test reads it.
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

// Buffer is a log destination a test reads while the log writes to it.
type Buffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

// String is what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
