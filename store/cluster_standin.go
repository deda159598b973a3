package store

// STAND-IN of helpers "s3" and "sync"'s store API with the agreed
// signatures, so that branch ops builds before the merge. DELETE this file at
// the merge.

import (
	"context"
	"errors"
	"time"

	"registryd/store/objects"
)

// RemoteBlobs as agreed in issue 13.
type RemoteBlobs struct {
	Objects         objects.Store
	LocalCacheBytes int64
	Lock            func(ctx context.Context, key string) (unlock func(), err error)
	OrphanGrace     time.Duration
}

// OpenBlobsRemote always fails in the stand-in.
func OpenBlobsRemote(dataDir string, o RemoteBlobs) (*Blobs, error) {
	return nil, errors.New("store stand-in: OpenBlobsRemote not merged")
}

// Clustered as agreed (stand-in: never).
func (s *Store) Clustered() bool { return false }

// Lease as agreed (stand-in: bolt's behaviour, granted at once).
func (s *Store) Lease(ctx context.Context, key string) (func(), error) { return func() {}, nil }

// TryLease as agreed (stand-in: bolt's behaviour, always ok).
func (s *Store) TryLease(ctx context.Context, key string) (func(), bool, error) {
	return func() {}, true, nil
}
