package proxy

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
)

// Upload headers: the spec's names first, GitLab's (Workhorse's) as aliases.
var (
	hdrGatewayToken = "Svc-Gateway-Api-Request"
	hdrUploadETag   = "Etag"
	hdrUploadCType  = [...]string{"Svc-Gateway-Send-Dependency-Content-Type", "Workhorse-Proxy-Content-Type"}
	hdrUpstreamGID  = [...]string{"Upstream-Gid", "X-Gitlab-Virtual-Registry-Upstream-Global-Id"}
	upstreamGIDs    = [...]string{"gid://registryd/Upstream/", "gid://gitlab/VirtualRegistries::Packages::Maven::Upstream/"}
)

// maxOtherPart bounds multipart parts other than "file" (GitLab's gateway
// sends a few small fields); they are read and dropped.
const maxOtherPart = 64 << 10

// upload answers POST .../maven/:id/*path/upload: a gateway that fetched a
// file from an upstream stores it in the cache. It needs the gateway's proof
// (a fresh HS256 JWT, else 403) and a caller who may read the registry; the
// upstream named by Upstream-GID must belong to the registry (else 404). The
// multipart "file" streams into a blob (hashed on the way, never whole in
// memory), and the entry for (upstream, /path) is created or replaced in one
// transaction, counting one download. 200 with an empty body.
func (s *Server) upload(ctx *fasthttp.RequestCtx, idb, raw []byte) error {
	if !s.auth.VirtualRegistryEnabled() {
		return errGate
	}
	id, ok := parseID(idb)
	if !ok {
		return errBadID
	}
	if verifyGatewayToken(ctx.Request.Header.Peek(hdrGatewayToken), s.secret, s.now()) != nil {
		return errNoGateway
	}
	pr, err := s.principal(ctx)
	if err != nil {
		return err
	}
	reg, err := s.registryFor(pr, id, s.st.CacheGeneration())
	if err != nil {
		return err
	}
	up, ok := upstreamFromGID(ctx, reg)
	if !ok {
		return errUpstreamUnknown
	}
	p, err := maven.Classify(b2s(raw))
	if err != nil {
		return err
	}
	if p.Kind == maven.Checksum {
		return errUploadChecksum
	}
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > s.opts.Listener.MaxUploadBytes {
		return errUploadTooLarge
	}
	boundary := ctx.Request.Header.MultipartFormBoundary()
	if len(boundary) == 0 {
		return errNoFile
	}
	body := ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.Request.Body())
	}
	lim := &limitedBody{r: body, left: s.opts.Listener.MaxUploadBytes}
	w, err := s.receiveFile(multipart.NewReader(lim, string(boundary)), lim)
	if err != nil {
		return err
	}
	defer w.Abort()
	d, err := w.Finish()
	if err != nil {
		return err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	e := store.CacheEntry{
		UpstreamID:     up.id,
		RelativePath:   "/" + p.Rel, // a new string: p.Rel aliases the request
		ContentType:    firstHeader(ctx, hdrUploadCType[:]),
		ETag:           strings.TrimSpace(string(ctx.Request.Header.Peek(hdrUploadETag))),
		CheckedAt:      now,
		DownloadsCount: 1,
		DownloadedAt:   &now,
	}
	if e.ContentType == "" {
		e.ContentType = maven.ContentType(p.Rel)
	}
	if _, err := s.st.Publish(s.blobs, w, d, e); err != nil {
		var ve *store.ValidationError
		if errors.As(err, &ve) {
			return badRequest(ve.Error())
		}
		return err
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	return nil
}

// receiveFile reads the multipart body and streams its "file" part into a
// new blob writer.
func (s *Server) receiveFile(mr *multipart.Reader, lim *limitedBody) (*blob.Writer, error) {
	var w *blob.Writer
	fail := func(err error) (*blob.Writer, error) {
		if w != nil {
			w.Abort()
		}
		if lim.exceeded {
			return nil, errUploadTooLarge
		}
		return nil, err
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(errUploadBody)
		}
		if part.FormName() != "file" || w != nil {
			n, err := io.CopyN(io.Discard, part, maxOtherPart+1)
			if n > maxOtherPart || (err != nil && err != io.EOF) {
				return fail(errUploadBody)
			}
			continue
		}
		if w, err = s.blobs.Create(); err != nil {
			return nil, err
		}
		n, err := io.Copy(w, io.LimitReader(part, s.maxFile+1))
		switch {
		case n > s.maxFile:
			lim.exceeded = true
			return fail(errUploadTooLarge)
		case blob.IsDiskFull(err):
			return fail(err) // 507
		case err != nil:
			return fail(errUploadBody)
		}
	}
	if w == nil {
		return fail(errNoFile)
	}
	return w, nil
}

// limitedBody reads at most left bytes and remembers whether the body was
// longer, so the answer is 413 rather than a parse error.
type limitedBody struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.exceeded = true
		return 0, errUploadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// upstreamFromGID finds the upstream named by the Upstream-GID header (or
// GitLab's alias) among the registry's upstreams.
func upstreamFromGID(ctx *fasthttp.RequestCtx, reg *registryView) (*upstreamView, bool) {
	gid := firstHeader(ctx, hdrUpstreamGID[:])
	for _, prefix := range upstreamGIDs {
		if rest, ok := strings.CutPrefix(gid, prefix); ok {
			id, err := strconv.ParseInt(rest, 10, 64)
			if err != nil || id <= 0 {
				return nil, false
			}
			up := reg.upstream(id)
			return up, up != nil
		}
	}
	return nil, false
}

// firstHeader is the first non-blank value among the header names, copied.
func firstHeader(ctx *fasthttp.RequestCtx, names []string) string {
	for _, n := range names {
		if v := bytes.TrimSpace(ctx.Request.Header.Peek(n)); len(v) > 0 {
			return string(v)
		}
	}
	return ""
}
