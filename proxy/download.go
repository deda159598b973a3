package proxy

import (
	"bytes"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/maven"
	"registryd/store"
)

// download answers GET and HEAD .../maven/:id/*path. The checks run in
// GitLab's order where it matters to clients: the feature gate before
// anything (404), then request shape (400), then authentication (401, with
// the challenge Maven waits for), then authorization (403, or 404 when the
// registry must stay invisible), then "No upstreams set".
func (s *Server) download(x *exchange, idb, raw []byte) error {
	ctx := x.ctx
	if !s.auth.VirtualRegistryEnabled() {
		return errGate
	}
	id, ok := parseID(idb)
	if !ok {
		return errBadID
	}
	if isBrowser(ctx.UserAgent()) {
		return errBrowser
	}
	p, err := maven.Classify(b2s(raw))
	if err != nil {
		return err
	}
	pr, err := s.principal(ctx)
	x.who = pr
	if err != nil {
		return err
	}
	gen := s.st.CacheGeneration()
	reg, err := s.registryFor(pr, id, gen)
	if err != nil {
		return err
	}
	x.reg, x.path = reg, p
	x.conn, x.remote = ctx.Conn(), ctx.RemoteAddr()
	return s.serveDownload(x, gen)
}

// principal authenticates the request for the download surface: personal
// access tokens (PRIVATE-TOKEN header or private_token query, Bearer, Basic
// with the username) with scope
// read_virtual_registry, api or read_api, and group deploy tokens
// (Deploy-Token, Basic with the deploy token's username).
func (s *Server) principal(ctx *fasthttp.RequestCtx) (auth.Principal, error) {
	h := &ctx.Request.Header
	// The views below alias request memory; auth hashes them and keeps
	// nothing, so they do not outlive the request.
	c := auth.Credentials{
		PrivateToken: b2s(h.Peek("Private-Token")),
		DeployToken:  b2s(h.Peek("Deploy-Token")),
	}
	if a := h.Peek("Authorization"); len(a) > 0 {
		c.ParseAuthorization(b2s(a))
	}
	// GitLab's API also takes the token as ?private_token=; parse the query
	// only when there is one.
	if c.PrivateToken == "" && bytes.IndexByte(ctx.Request.Header.RequestURI(), '?') >= 0 {
		c.PrivateToken = b2s(ctx.QueryArgs().Peek("private_token"))
	}
	p, err := s.auth.Authenticate(c, auth.Download)
	if err != nil {
		return p, err
	}
	if !p.Authenticated() {
		return p, errUnauthorized
	}
	if p.Kind == auth.PersonalToken && !p.HasScope(store.ScopeReadVirtualRegistry, store.ScopeAPI, store.ScopeReadAPI) {
		return p, errInsufficient
	}
	return p, nil
}

// registryFor returns the registry if the caller may read it. A caller who
// cannot see the registry's group at all gets the same 404 as for a registry
// that does not exist; one who can see it gets 403.
func (s *Server) registryFor(p auth.Principal, id int64, gen uint64) (*registryView, error) {
	reg, err := s.registry(id, gen)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errInvisible
		}
		return nil, err
	}
	if s.auth.CanReadRegistries(p, reg.group) {
		if len(reg.ups) == 0 {
			return nil, errNoUpstreams
		}
		return reg, nil
	}
	g, err := s.st.Group(reg.group)
	if errors.Is(err, store.ErrUnavailable) {
		// No access may only mean the index's database failed: a 503, not
		// a 404 a client would remember.
		return nil, err
	}
	if err != nil {
		return nil, errInvisible
	}
	if g.Visibility == store.Public || (g.Visibility == store.Internal && p.Kind == auth.PersonalToken) {
		return nil, errForbidden
	}
	return nil, errInvisible
}

// isBrowser recognises web browsers by their User-Agent (GitLab answers
// them 400 on this endpoint): "Mozilla/" plus a browser engine token. Maven
// ("Apache-Maven/"), Gradle, Ivy, curl and Java's own client do not match.
func isBrowser(ua []byte) bool {
	if !bytes.HasPrefix(ua, []byte("Mozilla/")) {
		return false
	}
	for _, engine := range [...]string{"AppleWebKit/", "Gecko/", "Trident/", "Presto/"} {
		if bytes.Contains(ua, []byte(engine)) {
			return true
		}
	}
	return false
}

// exchange is one request of the listener: ctx and start are the
// listener's, for serving and for the access log; request is what the
// engine reads and records of a download.
type exchange struct {
	request
	ctx   *fasthttp.RequestCtx
	start time.Time
}

// serveDownload answers x top-down: resolve (from the cache, by starting
// or joining a flight, whose fill runs on its own, or by composing a
// document), then serve the answer. A blob found missing while serving is
// reported back (blobGone), and resolution fetches the file again.
func (s *Server) serveDownload(x *exchange, gen uint64) error {
	a, err := s.resolveDownload(&x.request, gen)
	for reports := 1; err == nil; reports++ {
		if err = s.serve(x, a); !errors.Is(err, errBlobGone) {
			return err
		}
		if reports >= maxLookups {
			a.seen = anyGen
		}
		a, err = s.blobGone(&x.request, a)
	}
	return err
}

// serve renders a.
func (s *Server) serve(x *exchange, a answer) error {
	switch {
	case a.doc != nil:
		return s.serveComposed(x, a.doc)
	case a.flight != nil:
		return s.serveFlight(x, a.flight)
	case a.uncached != nil:
		return s.serveDigest(x, a.uncached)
	}
	return s.serveEntry(x, a.entry)
}
