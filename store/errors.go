package store

import (
	"errors"
	"sort"
	"strings"

	"registryd/store/kv"
)

// ErrUnavailable is matched by every failure of the index's engine itself
// (kv.ErrUnavailable: its database is down, unreachable or timed out), as
// opposed to an answer about the records. The listeners answer 503.
var ErrUnavailable = kv.ErrUnavailable

// ErrNotFound is matched by every not-found error of the store.
var ErrNotFound = errors.New("not found")

// NotFoundError names the kind of record that was missing ("Group", "User",
// "Project", "Upstream", ...). It matches ErrNotFound.
type NotFoundError struct{ Resource string }

func (e *NotFoundError) Error() string { return e.Resource + " not found" }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

func notFound(resource string) error { return &NotFoundError{Resource: resource} }

// ErrConflict is matched by conflicts that are not validation failures
// (a member that already exists, for example).
var ErrConflict = errors.New("conflict")

// ConflictError carries the reason of a conflict. It matches ErrConflict.
type ConflictError struct{ Reason string }

func (e *ConflictError) Error() string { return e.Reason }

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ValidationError lists, per attribute, why a record cannot be written.
type ValidationError struct{ Fields map[string][]string }

func (e *ValidationError) Error() string {
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+strings.Join(e.Fields[k], ", "))
	}
	return "validation failed: " + strings.Join(parts, "; ")
}

// Add records one message for one attribute.
func (e *ValidationError) Add(field, msg string) {
	if e.Fields == nil {
		e.Fields = map[string][]string{}
	}
	e.Fields[field] = append(e.Fields[field], msg)
}

// Err returns e when it holds a message, else nil.
func (e *ValidationError) Err() error {
	if e == nil || len(e.Fields) == 0 {
		return nil
	}
	return e
}

func invalid(field, msg string) error {
	v := &ValidationError{}
	v.Add(field, msg)
	return v
}

// ErrNotTopLevel is returned when a group-level virtual registry operation
// names a subgroup.
var ErrNotTopLevel = errors.New("only available on top-level groups")
