package proxy

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/store/blob"
	"registryd/store/objects"
)

// Local misses of remote blobs (cluster mode, blob.OpenTiered): the
// index has the entry, this node's local tier does not have its file
// (evicted, or filled on another node). The file streams from the bucket
// (blob.Store.OpenRemote), which fills the local tier as it goes; only
// when the object is missing too is the file fetched from its upstream
// again (errBlobGone), as for a blob file lost on a single node. A bucket
// that is away answers 503 with the reason (errObjectStore).

// localMiss handles a blob file that could not be opened for v: from the
// bucket when the blobs are remote and the file is only missing locally,
// else as before (blobError).
func (s *Server) localMiss(x *exchange, v *entryView, start, n int64, err error) error {
	if !s.blobs.Remote() || !errors.Is(err, fs.ErrNotExist) {
		return s.blobError(v, err)
	}
	return s.serveRemote(x, v, start, n)
}

// serveRemote answers a GET of v (bytes [start, start+n)) from the bucket.
// The headers are set already. A small file is read whole and kept in the
// memory cache, as a hit from disk is. A large one streams with its known
// length; the store hands over its last bytes only once the digest
// matched, so a damaged object ends the response short and the connection
// is cut, as a broken fill does. A Range of a large file is served from
// the local file once the whole object has arrived (fetch, then serve).
func (s *Server) serveRemote(x *exchange, v *entryView, start, n int64) error {
	ctx := x.ctx
	size := v.e.Size
	rc, cancel, err := s.openRemote(v)
	if err != nil {
		return err
	}
	if s.small.fits(size) {
		b := make([]byte, 0, size)
		b, err = readAllInto(b, rc)
		rc.Close()
		cancel()
		if err != nil {
			return s.remoteFailed(v, err)
		}
		s.small.keep(v.e.SHA256, b)
		ctx.Response.SetBodyRaw(b[start : start+n])
		s.served(x, v, n)
		return nil
	}
	if n != size {
		_, err := io.Copy(io.Discard, rc)
		rc.Close()
		cancel()
		if err != nil {
			return s.remoteFailed(v, err)
		}
		if f, err := os.Open(v.blob); err == nil {
			return s.serveFile(x, v, f, start, n)
		}
		// Larger than the local tier keeps: the whole file, with 200
		// (RFC 9110 lets a server ignore Range).
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.Response.Header.Del("Content-Range")
		start, n = 0, size
		if rc, cancel, err = s.openRemote(v); err != nil {
			return err
		}
	}
	body := &remoteBody{rc: rc, cancel: cancel}
	body.stall = time.AfterFunc(remoteStall, cancel)
	ctx.SetBodyStream(body, int(n))
	s.served(x, v, n)
	return nil
}

// openRemote opens v's object under a context that lives until the body is
// closed (or stalls: remoteBody).
func (s *Server) openRemote(v *entryView) (io.ReadCloser, context.CancelFunc, error) {
	rctx, cancel := context.WithCancel(context.Background())
	rc, err := s.blobs.OpenRemote(rctx, v.e.SHA256, v.e.Size)
	if err != nil {
		cancel()
		return nil, nil, s.remoteFailed(v, err)
	}
	return rc, cancel, nil
}

// remoteFailed maps a failure to read v's object before any byte was
// sent: missing (or announced with the wrong size), or damaged (the store
// deleted it), is errBlobGone, so the file is fetched from its upstream
// again and republished; an outage is errObjectStore (503).
func (s *Server) remoteFailed(v *entryView, err error) error {
	switch {
	case errors.Is(err, objects.ErrNotFound):
		s.log.Warn("a cached entry's object is missing from the bucket; fetching it again",
			"upstream", v.e.UpstreamID, "path", v.e.RelativePath, "blob", v.e.SHA256, "err", err)
		return errBlobGone
	case errors.Is(err, blob.ErrObjectMismatch):
		s.log.Error("a cached entry's object does not match its digest; it was deleted and is fetched again",
			"upstream", v.e.UpstreamID, "path", v.e.RelativePath, "blob", v.e.SHA256, "err", err)
		return errBlobGone
	}
	return &objectStoreError{err: err}
}

// serveFile sends bytes [start, start+n) of the open blob file f.
func (s *Server) serveFile(x *exchange, v *entryView, f *os.File, start, n int64) error {
	if start > 0 {
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			f.Close()
			return err
		}
	}
	body := fileBodies.Get().(*fileBody)
	body.f, body.lr = f, io.LimitedReader{R: f, N: n}
	x.ctx.SetBodyStream(body, int(n))
	s.served(x, v, n)
	return nil
}

// served counts a response body of n bytes of v.
func (s *Server) served(x *exchange, v *entryView, n int64) {
	s.countServed(x, v.e.UpstreamID, n)
	s.downloads.add(v.e.UpstreamID, v.e.RelativePath, s.now())
}

// remoteBody is an object as a response body. Its context is cancelled
// when the bucket sends nothing for remoteStall, and at Close.
type remoteBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	stall  *time.Timer
	once   sync.Once
}

func (b *remoteBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.stall.Reset(remoteStall)
	}
	return n, err
}

// Close ends the read; fasthttp calls it once the response is written.
func (b *remoteBody) Close() error {
	var err error
	b.once.Do(func() {
		b.stall.Stop()
		err = b.rc.Close()
		b.cancel()
	})
	return err
}

// objectStoreError is a request the bucket could not serve (away, timed
// out, refusing): 503 with the reason, since the file exists and a retry
// may well succeed.
type objectStoreError struct{ err error }

func (e *objectStoreError) Error() string { return "object storage: " + e.err.Error() }
func (e *objectStoreError) Unwrap() error { return e.err }

// Is makes every objectStoreError match objects.ErrUnavailable, which
// toAPI answers (objectStoreAnswer).
func (e *objectStoreError) Is(target error) bool { return target == objects.ErrUnavailable }

// objectStoreAnswer is the 503 of a bucket that failed.
func objectStoreAnswer(err error) *apiError {
	reason := objects.Reason(err)
	if reason == "" {
		reason = "request failed"
	}
	return message(fasthttp.StatusServiceUnavailable, "503 Service Unavailable - object storage not available: "+reason)
}

// countServed counts n body bytes sent for x, of a file of upstream up (0:
// merged metadata, built of several upstreams, counted by registry only).
func (s *Server) countServed(x *exchange, up, n int64) {
	s.met.series.bytes(x.reg.id, x.res).Add(float64(n))
	if up != 0 {
		s.met.series.upstreamBytes(up, x.res).Add(float64(n))
	}
}
