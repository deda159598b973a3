// Package eventimport reads the activity events an admin imports (POST
// /admin/events): a JSON array or NDJSON stream decoded one event at a time,
// each checked and completed with the defaults that do not depend on the
// clock. The store then keeps what its indexes need: known codes, existing
// projects and authors, the clock's defaults.
package eventimport

// Error is a body that is not a stream of events: not JSON, cut short,
// neither an array nor objects. Reason says what is wrong in words for the
// admin; Err is the reader's own failure, if that was the cause (a body
// over the listener's limit).
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason }

// Unwrap gives the reader's failure.
func (e *Error) Unwrap() error { return e.Err }

func formatError(reason string) error { return &Error{Reason: reason} }

// deref is *p, or the zero value when p is nil: an optional field that
// defaults to its zero value.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
