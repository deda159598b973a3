package objects

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options configure NewS3.
type S3Options struct {
	// Endpoint is the server's URL, http or https (https://s3.amazonaws.com,
	// http://127.0.0.1:9000); a path is not allowed.
	Endpoint string
	Bucket   string
	// Region is the bucket's region; empty asks the server once.
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	// PathStyle addresses the bucket as ENDPOINT/BUCKET/KEY (MinIO, Ceph
	// and most self-hosted servers) rather than BUCKET.ENDPOINT/KEY.
	PathStyle bool
	// Prefix is put before every key ("registryd/"), so one bucket can hold
	// several installations. A missing trailing slash is added.
	Prefix string
}

// S3 is a Store on an S3-compatible bucket, through minio-go (a maintained
// S3 client that streams multipart uploads from a file without buffering
// whole parts in memory, and signs for AWS and every S3 clone).
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string
}

// partSize is the size of one part of a multipart upload (S3's minimum is
// 5 MiB; fewer, larger parts cost fewer requests). Files up to this size go
// in one PUT. minio-go reads the parts of an *os.File with ReadAt, so an
// upload holds no part in memory.
const partSize = 16 << 20

// maxRetries is how often minio-go tries a request that failed in a way it
// deems transient (its default is 10, with backoff): an outage must answer
// 503 within seconds, not after a minute of retries. The callers' own
// retries (the next request, the next collection) do the rest.
const maxRetries = 2

// NewS3 returns a Store on the bucket. It does not contact the server.
func NewS3(o S3Options) (*S3, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("objects: endpoint %q is not an http or https URL", o.Endpoint)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("objects: endpoint %q has a path or query; give the bucket separately", o.Endpoint)
	}
	if o.Bucket == "" {
		return nil, errors.New("objects: no bucket")
	}
	lookup := minio.BucketLookupAuto
	if o.PathStyle {
		lookup = minio.BucketLookupPath
	}
	tr, err := minio.DefaultTransport(u.Scheme == "https")
	if err != nil {
		return nil, fmt.Errorf("objects: %w", err)
	}
	// A server that accepts the connection and then says nothing must
	// not hold a request until its ctx ends.
	tr.ResponseHeaderTimeout = 30 * time.Second
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(o.AccessKeyID, o.SecretAccessKey, ""),
		Secure:       u.Scheme == "https",
		Region:       o.Region,
		BucketLookup: lookup,
		Transport:    tr,
		MaxRetries:   maxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("objects: %w", err)
	}
	p := o.Prefix
	if p != "" && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return &S3{c: c, bucket: o.Bucket, prefix: p}, nil
}

// Bucket is the bucket's name.
func (s *S3) Bucket() string { return s.bucket }

// Put uploads size bytes of r: in one PUT up to partSize, else as a
// multipart upload, completed only when every part is in. Either way the
// object appears whole or not at all.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, r, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		PartSize:    partSize,
	})
	if err != nil {
		return s.fail("put", key, err)
	}
	return nil
}

// Get opens the object. The GET is sent here (not at the first Read), so a
// missing object or an outage is reported by Get itself.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	o, err := s.c.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	oi, err := o.Stat()
	if err != nil {
		o.Close()
		return nil, s.fail("get", key, err)
	}
	return &s3Body{o: o, s: s, key: key, size: oi.Size}, nil
}

// s3Body wraps the object's read errors (a connection cut mid-body) so
// they match ErrUnavailable.
type s3Body struct {
	o    *minio.Object
	s    *S3
	key  string
	size int64
}

// Size is the object's size, as the GET's answer announced it.
func (b *s3Body) Size() int64 { return b.size }

func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.o.Read(p)
	if err != nil && err != io.EOF {
		err = b.s.fail("get", b.key, err)
	}
	return n, err
}

func (b *s3Body) Close() error { return b.o.Close() }

// Stat describes the object (a HEAD).
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	oi, err := s.c.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.fail("stat", key, err)
	}
	return Info{Key: key, Size: oi.Size, Modified: oi.LastModified}, nil
}

// Delete removes the object (S3 answers a delete of a missing key with
// success).
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil {
		if err := s.fail("delete", key, err); errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// List lists the objects under prefix, in pages of 1000 (S3's).
func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's lister when fn stops early
	for oi := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			return s.fail("list", prefix, oi.Err)
		}
		if err := fn(Info{Key: strings.TrimPrefix(oi.Key, s.prefix), Size: oi.Size, Modified: oi.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// AbortUploads aborts the multipart uploads under prefix that began before
// before: those of a node that died mid-upload (S3 keeps their parts, and
// bills them, until aborted; a bucket lifecycle rule
// AbortIncompleteMultipartUpload does the same). Each is aborted by its
// upload id: another node may be uploading the same key right now (it took
// over the dead node's fill), and its upload must complete.
//
// MinIO lists multipart uploads by exact key only, so under a prefix it
// lists none and this finds nothing there; MinIO drops an upload left
// incomplete for 24 hours itself (its api stale_uploads_expiry).
func (s *S3) AbortUploads(ctx context.Context, prefix string, before time.Time) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	core := minio.Core{Client: s.c}
	n := 0
	for u := range s.c.ListIncompleteUploads(ctx, s.bucket, s.prefix+prefix, true) {
		if u.Err != nil {
			return n, s.fail("list uploads", prefix, u.Err)
		}
		if !u.Initiated.Before(before) {
			continue
		}
		if err := core.AbortMultipartUpload(ctx, s.bucket, u.Key, u.UploadID); err != nil {
			return n, s.fail("abort upload", strings.TrimPrefix(u.Key, s.prefix), err)
		}
		n++
	}
	return n, ctx.Err()
}

// fail classifies err: a missing object wraps ErrNotFound, anything else
// is an *Error (matching ErrUnavailable) with a client-safe reason.
func (s *S3) fail(op, key string, err error) error {
	er := minio.ToErrorResponse(err)
	if er.Code == "NoSuchKey" || (er.StatusCode == http.StatusNotFound && er.Code != "NoSuchBucket") {
		return fmt.Errorf("objects: %s %s: %w", op, key, ErrNotFound)
	}
	return &Error{Op: op, Key: key, Reason: reason(err, er), Err: err}
}

func reason(err error, er minio.ErrorResponse) string {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case er.StatusCode != 0:
		r := "answered " + strconv.Itoa(er.StatusCode)
		if er.Code != "" {
			r += " " + er.Code
		}
		return r
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.As(err, &oe) && oe.Op == "dial":
		return "connection failed"
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "connection closed mid-body"
	}
	return "request failed"
}
