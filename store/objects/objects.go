// Package objects is registryd's access to blob bytes kept in an object
// store (an S3-compatible bucket: AWS S3, MinIO, Ceph RGW, GCS's S3 API),
// the shared tier under the nodes' local blob directories in cluster mode.
// It is a plain object-store client (keys, prefix, listing, multipart
// clean-up), kept apart from package store/blob, whose Bucket tier puts
// content-addressed keys (sha256/ab/cd/<sha>, never changed once written)
// on it: `registryd migrate` (clustercopy) uploads through it too, and
// tests wrap it with faults.
package objects

import (
	"context"
	"errors"
	"io"
	"time"
)

// Store is an object store. Every call is bounded by its ctx.
type Store interface {
	// Put stores size bytes read from r under key. The object becomes
	// visible whole or not at all: S3 makes an object visible only when
	// its upload completes (a single PUT, or CompleteMultipartUpload for
	// a multipart one), and an interrupted upload leaves nothing under
	// key. r yielding other than size bytes fails the Put.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object for reading; ErrNotFound when there is none.
	// The body is read under ctx.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object; ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object. Deleting a missing object is no error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in key
	// order, until fn returns an error (which List returns).
	List(ctx context.Context, prefix string, fn func(Info) error) error
}

// Info describes one object.
type Info struct {
	Key      string // without the store's own prefix
	Size     int64
	Modified time.Time // when the upload completed (the server's clock)
}

// ErrNotFound is an object that does not exist.
var ErrNotFound = errors.New("objects: no such object")

// ErrUnavailable is matched (errors.Is) by every failure of the object
// store itself: unreachable, timed out, refusing (5xx, SlowDown), denying
// our credentials. The proxy answers it with 503 and Reason.
var ErrUnavailable = errors.New("object storage unavailable")

// Error is a failed call. It matches ErrUnavailable unless NotFound.
type Error struct {
	Op  string // put, get, stat, delete, list
	Key string
	// Reason is a short phrase safe to show a client: no address, no
	// credential, no server text (e.g. "timed out", "answered 503 SlowDown").
	Reason string
	Err    error
}

func (e *Error) Error() string {
	msg := "objects: " + e.Op
	if e.Key != "" {
		msg += " " + e.Key
	}
	return msg + ": " + e.Reason + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes every Error match ErrUnavailable.
func (e *Error) Is(target error) bool { return target == ErrUnavailable }

// Reason is the client-safe reason of an object-store failure, or "" when
// err is none.
func Reason(err error) string {
	var oe *Error
	if errors.As(err, &oe) {
		return oe.Reason
	}
	return ""
}
