package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"registryd/store/blob"
	"registryd/store/objects"
)

// The engine's reads of whole blobs from the bucket (cluster mode,
// blob.OpenTiered), for the documents merged metadata reads; the listener
// streams files from it (remote.go).

// remoteStall is how long a body from the bucket may send nothing before
// the response is cut: a bucket that stalls mid-object must not hold a
// client (and a connection) forever.
const remoteStall = time.Minute

// readRemote reads a whole blob from the bucket (filling the local tier),
// for the documents merged metadata reads. An object missing or damaged is
// fs.ErrNotExist, a blob gone as on a single node (the entry is dropped and
// the document fetched again); an outage stays an objects.ErrUnavailable.
func (s *engine) readRemote(sha string, size int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteStall)
	defer cancel()
	rc, err := s.blobs.OpenRemote(ctx, sha, size)
	if err == nil {
		var b []byte
		b, err = readAllInto(make([]byte, 0, size), rc)
		rc.Close()
		if err == nil {
			s.small.keep(sha, b)
			return b, nil
		}
	}
	if errors.Is(err, objects.ErrNotFound) || errors.Is(err, blob.ErrObjectMismatch) {
		return nil, fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return nil, err
}

// readAllInto reads r to its end into b (whose capacity is the expected
// size, so there is one allocation).
func readAllInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			// The store's reader ends at the entry's size; read once more
			// to see its end (or its verdict).
			var one [1]byte
			k, err := r.Read(one[:])
			if k > 0 {
				return b, errors.New("object longer than its entry")
			}
			if err == io.EOF {
				return b, nil
			}
			if err != nil {
				return b, err
			}
			continue
		}
		k, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
