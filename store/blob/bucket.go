package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"registryd/store/objects"
)

// Bucket is the tier in an object store (package objects: an S3-compatible
// bucket) shared by every node, under content-addressed keys
// sha256/ab/cd/<sha>. S3 makes an upload visible whole or not at all, so no
// reader ever sees part of an object. It is the peer of Disk; a node keeps
// it under a local Disk (Tiered), so that a hit is still a local file.
type Bucket struct {
	obj objects.Store
}

var _ Tier = (*Bucket)(nil)

// newBucket is the tier on obj.
func newBucket(obj objects.Store) *Bucket { return &Bucket{obj: obj} }

// ObjectKey is the object store key of the blob sha.
func ObjectKey(sha string) string {
	return "sha256/" + sha[0:2] + "/" + sha[2:4] + "/" + sha
}

// notFound wraps an objects.ErrNotFound so that it matches ErrNotFound too.
func notFound(err error) error {
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// Put uploads the file tmp as the blob sha, unless an object of that key
// and size is there already; tmp stays the caller's.
func (b *Bucket) Put(ctx context.Context, tmp, sha string, size int64) (created bool, err error) {
	key := ObjectKey(sha)
	info, err := b.obj.Stat(ctx, key)
	switch {
	case err == nil && info.Size == size:
		// Content addressing: these bytes are in the bucket already.
		return false, nil
	case err == nil || errors.Is(err, objects.ErrNotFound):
		f, err := os.Open(tmp)
		if err != nil {
			return false, fmt.Errorf("blobs: %w", err)
		}
		defer f.Close()
		if err := b.obj.Put(ctx, key, f, size); err != nil {
			return false, fmt.Errorf("blobs: uploading: %w", err)
		}
		return true, nil
	default:
		return false, fmt.Errorf("blobs: %w", err)
	}
}

// Get opens the object of sha. A missing object, or one of another size
// than the index's, wraps ErrNotFound and objects.ErrNotFound (the latter
// also ErrObjectMismatch); an outage matches objects.ErrUnavailable. The
// body is not verified here: Tiered's reader hashes it.
func (b *Bucket) Get(ctx context.Context, sha string, size int64) (io.ReadCloser, error) {
	src, err := b.obj.Get(ctx, ObjectKey(sha))
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", notFound(err))
	}
	if sz, ok := src.(interface{ Size() int64 }); ok && sz.Size() != size {
		src.Close()
		return nil, fmt.Errorf("%w: %s has %d bytes, the index says %d: %w: %w", ErrObjectMismatch, sha, sz.Size(), size, ErrNotFound, objects.ErrNotFound)
	}
	return src, nil
}

// Stat reports the size of the object; ErrNotFound when there is none.
func (b *Bucket) Stat(ctx context.Context, sha string) (int64, error) {
	info, err := b.obj.Stat(ctx, ObjectKey(sha))
	if err != nil {
		return 0, notFound(err)
	}
	return info.Size, nil
}

// Delete removes the object and reports its size; ErrNotFound when there
// was none.
func (b *Bucket) Delete(ctx context.Context, sha string) (int64, error) {
	size, err := b.Stat(ctx, sha)
	if errors.Is(err, ErrNotFound) {
		return 0, err
	}
	// A stat that failed otherwise leaves the size unknown; the delete
	// says whether the bucket answers.
	if err := b.remove(ctx, sha); err != nil {
		return 0, err
	}
	return size, nil
}

func (b *Bucket) remove(ctx context.Context, sha string) error {
	return b.obj.Delete(ctx, ObjectKey(sha))
}

// List calls fn for every object under sha256/; a key that is not a blob's
// is listed with an empty SHA256 (counted, never to be deleted).
func (b *Bucket) List(ctx context.Context, fn func(Info) error) error {
	return b.obj.List(ctx, "sha256/", func(i objects.Info) error {
		sha := i.Key[strings.LastIndexByte(i.Key, '/')+1:]
		if !ValidDigest(sha) || i.Key != ObjectKey(sha) {
			sha = ""
		}
		return fn(Info{SHA256: sha, Size: i.Size, Modified: i.Modified})
	})
}

// AbortUploads aborts the incomplete multipart uploads begun before before,
// when the object store can; 0 otherwise.
func (b *Bucket) AbortUploads(ctx context.Context, before time.Time) (int, error) {
	if a, ok := b.obj.(interface {
		AbortUploads(ctx context.Context, prefix string, before time.Time) (int, error)
	}); ok {
		return a.AbortUploads(ctx, "sha256/", before)
	}
	return 0, nil
}
