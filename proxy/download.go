package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
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
	if k := composedKind(x); k != composeNone {
		return s.resolveComposed(x, k, gen)
	}
	if x.reg = s.screen(x); len(x.reg.ups) == 0 {
		x.miss = &missError{failures: x.denied}
		return x.miss
	}
	return s.resolve(x, gen)
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

// --- resolution data, cached in memory ---

// registryView is a registry and its upstreams in position order, as of
// store generation gen.
type registryView struct {
	gen   uint64
	id    int64
	group int64
	ups   []*upstreamView
	upIDs []int64
	// merge: maven-metadata.xml is the merge of the upstreams' documents
	// (the registry's merge_metadata), not the first upstream's.
	merge bool
	// hasRules: some upstream has allow/deny rules (see screen).
	hasRules bool
}

// upstreamView is what resolution needs of an upstream.
type upstreamView struct {
	id           int64
	label        string // metric label: the id
	ep           upstream.Endpoint
	validity     time.Duration // cache_validity_hours; 0 = never stale
	metaValidity time.Duration // metadata_cache_validity_hours
	policy       string        // checksum policy: the upstream's own, else upstreams.checksum_policy
	// How long a 404 is remembered (negative.go), for metadata and for
	// other files: the upstream's own setting, else the global one.
	notFoundTTL, metaNotFoundTTL time.Duration
	// rules are the upstream's allow/deny rules, nil for none; rulesKey
	// changes whenever they do (merged metadata depends on them).
	rules    *upstreamRules
	rulesKey string
}

func (r *registryView) upstream(id int64) *upstreamView {
	for _, u := range r.ups {
		if u.id == id {
			return u
		}
	}
	return nil
}

// registry returns the registry's view, reading the store when the cached
// one is older than gen. gen is read before the store, so a change that
// commits meanwhile makes the view stale, never wrongly fresh.
func (s *Server) registry(id int64, gen uint64) (*registryView, error) {
	if v, ok := s.regs.Get(id); ok && v.gen == gen {
		return v, nil
	}
	r, err := s.st.Registry(id)
	if err != nil {
		return nil, err
	}
	list, err := s.st.RegistryUpstreams(id)
	if err != nil {
		return nil, err
	}
	ruleLists, err := s.st.RegistryUpstreamRules(id)
	if err != nil {
		return nil, err
	}
	v := &registryView{gen: gen, id: id, group: r.GroupID, merge: r.MergeMetadata()}
	for _, u := range list {
		policy := u.ChecksumPolicy
		if policy == "" {
			policy = s.opts.Upstreams.ChecksumPolicy
		}
		rules, rulesKey, err := s.compileRules(u.ID, ruleLists[u.ID])
		if err != nil {
			return nil, err
		}
		v.hasRules = v.hasRules || rules != nil
		v.ups = append(v.ups, &upstreamView{
			rules:           rules,
			rulesKey:        rulesKey,
			policy:          policy,
			id:              u.ID,
			label:           strconv.FormatInt(u.ID, 10),
			ep:              upstream.Endpoint{URL: u.URL, Username: u.Username, Password: u.Password},
			validity:        time.Duration(u.CacheValidityHours) * time.Hour,
			metaValidity:    time.Duration(u.MetadataCacheValidityHours) * time.Hour,
			notFoundTTL:     minutesOr(u.NotFoundCacheMinutes, s.opts.Upstreams.NotFoundTTL),
			metaNotFoundTTL: minutesOr(u.MetadataNotFoundCacheMinutes, s.opts.Upstreams.MetadataNotFoundTTL),
		})
		s.met.series.seenUpstream(u.ID)
		s.urls.note(s.health, u.ID, u.URL)
		v.upIDs = append(v.upIDs, u.ID)
	}
	s.regs.Add(id, v)
	return v, nil
}

// minutesOr is an upstream's optional setting in minutes, else def.
func minutesOr(m *int, def time.Duration) time.Duration {
	if m == nil {
		return def
	}
	return time.Duration(*m) * time.Minute
}

type entryKey struct {
	registry int64
	rel      string // without the leading slash
}

// entryView is the entry that answers a path in a registry (the one of the
// highest-positioned upstream that has one), or none, with its response
// headers formatted once.
type entryView struct {
	gen          uint64
	found        bool
	key          string // the relative path it is cached under (owned, not request memory)
	e            store.CacheEntry
	up           *upstreamView
	blob         string
	etag         string
	lastModified string
	disposition  string
	contentType  string
}

// lookup returns the entry for rel, or nil.
func (s *Server) lookup(reg *registryView, rel string, gen uint64) (*entryView, error) {
	cached, ok := s.entries.Get(entryKey{reg.id, rel})
	if ok && cached.gen == gen {
		if !cached.found {
			return nil, nil
		}
		return cached, nil
	}
	e, found, err := s.st.FirstCacheEntry(reg.upIDs, "/"+rel)
	if err != nil {
		return nil, err
	}
	// The generation moves on every change anywhere in the cache (each fill
	// elsewhere, each purge); most cached views are still right then. Reuse
	// the rendered headers of one whose entry is unchanged, re-pointing it at
	// the current registry view (an upstream's validity may have changed).
	if ok && found && cached.found && cached.e.SHA256 == e.SHA256 && cached.e.UpdatedAt.Equal(e.UpdatedAt) {
		if up := reg.upstream(e.UpstreamID); up != nil {
			v := *cached
			v.gen, v.e, v.up = gen, e, up
			s.entries.Add(entryKey{reg.id, cached.key}, &v)
			return &v, nil
		}
	}
	v := &entryView{gen: gen, key: strings.Clone(rel)}
	if found {
		up := reg.upstream(e.UpstreamID)
		if up == nil || !blob.ValidDigest(e.SHA256) {
			return nil, nil
		}
		v = newEntryView(s, up, v.key, e)
		v.gen = gen
	}
	s.entries.Add(entryKey{reg.id, v.key}, v)
	if !found {
		return nil, nil
	}
	return v, nil
}

// newEntryView is the view of e, an entry of up stored under rel, with
// its response headers formatted (gen 0: for the caller to set).
func newEntryView(s *Server, up *upstreamView, rel string, e store.CacheEntry) *entryView {
	v := &entryView{found: true, key: rel, e: e, up: up}
	v.blob = s.blobs.Path(e.SHA256)
	v.etag = `"` + e.SHA256 + `"`
	v.lastModified = string(fasthttp.AppendHTTPDate(nil, e.UpdatedAt))
	v.disposition = `attachment; filename="` + rel[strings.LastIndexByte(rel, '/')+1:] + `"`
	v.contentType = e.ContentType
	if v.contentType == "" {
		v.contentType = maven.ContentType(rel)
	}
	return v
}

// fresh reports whether v may be served without asking its upstream:
// within cache_validity_hours of the last check (metadata_cache_validity_hours
// for maven-metadata.xml; checksum sidecars follow their parent), where 0
// means never stale, and not invalidated by an admin. The client's
// Cache-Control is deliberately not consulted: Maven sends no-cache on every
// request.
func (v *entryView) fresh(kind maven.Kind, now time.Time) bool {
	if v.e.Invalidated {
		return false
	}
	d := v.up.validity
	if kind == maven.MetadataKind {
		d = v.up.metaValidity
	}
	return d == 0 || now.Before(v.e.CheckedAt.Add(d))
}

// --- resolution ---

// exchange is one download on its way through resolution: what the
// metrics and the access log record of it.
type exchange struct {
	ctx   *fasthttp.RequestCtx
	start time.Time
	who   auth.Principal
	reg   *registryView // nil until the registry is resolved and readable
	path  maven.Path
	res   result
	up    int64      // the upstream whose file, or stored copy, was served; 0 for none
	miss  *missError // why no upstream served the file, when none did
	// denied are the upstreams whose rules refused the file (see screen).
	denied []upstreamFailure
	// merge is how a merged document was built ("complete", "partial",
	// "single"); "" for any other answer. For a partial merge, miss holds
	// the upstreams that failed.
	merge string
}

// maxLookups bounds how often one request looks the cache up again because
// the cache changed between its lookup and its fetch (see join).
const maxLookups = 3

// resolve answers x from the cache or the upstreams. A lookup that missed
// while a flight for the file was storing it finds no flight to join
// afterwards; join then says to look again (errLookAgain) rather than fetch
// the file a second time.
func (s *Server) resolve(x *exchange, gen uint64) error {
	for attempt := 1; ; attempt++ {
		seen := gen
		if attempt == maxLookups {
			seen = anyGen
		}
		err := s.resolveOnce(x, gen, seen)
		if err != errLookAgain {
			return err
		}
		gen = s.st.CacheGeneration()
	}
}

func (s *Server) resolveOnce(x *exchange, gen, seen uint64) error {
	v, err := s.lookup(x.reg, x.path.EntryRel(), gen)
	if err != nil {
		return err
	}
	if v == nil {
		return s.fetchMiss(x, 0, seen)
	}
	if v.fresh(x.path.EntryKind(), s.now()) {
		x.res, x.up = resHit, v.e.UpstreamID
		err := s.serveEntry(x, v)
		if errors.Is(err, errBlobGone) {
			return s.fetchMiss(x, 0, seen)
		}
		return err
	}
	return s.revalidate(x, v, seen)
}

// revalidate handles a stale entry: one conditional GET (If-None-Match with
// the stored ETag; unconditional when none was stored) on the entry's own
// upstream, shared by every request for the same file, its wait for an
// answer bounded by upstreams.check_timeout. 304, or 200 with the same
// ETag: the entry is touched and served. 200 otherwise: the new body is
// read whole and verified, then served, and replaces the entry. 404/410:
// the entry is removed and the file looked up on the other upstreams like a
// miss. Any other failure (network error, timeout, 5xx, 401/403/429, and an
// answer the fill refuses: 204, 206, a web page, a checksum mismatch, ...),
// or an upstream that is unhealthy: the stale copy is served, because only
// a definite, verified answer about the file may replace it.
func (s *Server) revalidate(x *exchange, v *entryView, seen uint64) error {
	rel := x.path.EntryRel()
	x.up = v.up.id
	if s.keepStale(v.up, rel) {
		x.res = resStale
		return s.serveEntryOrMiss(x, v)
	}
	f, joined := s.join(v.up, rel, v.e.ETag, true, seen)
	if f == nil {
		return errLookAgain
	}
	if !s.awaitReady(x.ctx, f) {
		f.release()
		return errClientGone
	}
	switch f.kind {
	case flightStreaming:
		x.res = resMiss
		if joined {
			x.res = resJoin
		}
		return s.serveFlight(x, f)
	case flightNotModified:
		f.release()
		x.res = resRevalidated
		if joined {
			x.res = resJoin
		}
		return s.serveEntryOrMiss(x, v)
	case flightElsewhere:
		// Another node of the cluster revalidated (or stored) the file
		// meanwhile: its entry is the answer.
		return s.serveElsewhere(x, v.up, f)
	case flightNotFound:
		if !f.reval {
			// Joined a plain fetch of the same file (its blob had gone
			// missing): the 404 is news about this entry all the same.
			s.dropGone(f)
		}
		f.release()
		x.up = 0
		return s.fetchMiss(x, v.up.id, anyGen)
	}
	err := f.err
	f.release()
	x.res = resStale
	s.log.Warn("revalidation failed; serving the stale copy", "registry", x.reg.id, "upstream", v.up.id,
		"path", v.e.RelativePath, "err", failureReason(err))
	return s.serveEntryOrMiss(x, v)
}

// serveEntryOrMiss serves v, or fetches the file again when its blob file
// has gone missing (removed by hand, damaged disk).
func (s *Server) serveEntryOrMiss(x *exchange, v *entryView) error {
	err := s.serveEntry(x, v)
	if errors.Is(err, errBlobGone) {
		return s.fetchMiss(x, 0, anyGen)
	}
	return err
}

// keepStale reports whether a stale entry of up is served as it is, without
// asking up: its last answer for rel was refused lately, it is unhealthy, or
// rel failed on it lately (its path breaker is open).
func (s *Server) keepStale(up *upstreamView, rel string) bool {
	if s.refusedFor(up, rel) != nil {
		return true
	}
	return s.notAsked(up, rel) != nil
}

// turn is one upstream's turn for a file it holds no entry of: why it is
// not asked (err: remembered absent or refused until until, or unhealthy),
// or the flight for the file, joined or started, its outcome decided. f
// and err both nil: the cache changed since the lookup (see join).
type turn struct {
	f      *flight
	joined bool
	err    error
	until  time.Time
}

// askFor takes up's turn for rel (see turn).
func (s *Server) askFor(up *upstreamView, rel string, seen uint64) turn {
	return s.askForClient(nil, up, rel, seen)
}

// askForClient is askFor for the request of client, which may go away while
// the flight waits (awaitReady): the turn's error is then errClientGone.
func (s *Server) askForClient(client *fasthttp.RequestCtx, up *upstreamView, rel string, seen uint64) turn {
	if mark, ok := s.marks.recall(s.st, up.id, rel, s.now()); ok {
		if mark.refused != nil {
			return turn{err: mark.refused, until: mark.until}
		}
		s.met.skipped.WithLabelValues(up.label, skipNotFound).Inc()
		return turn{err: errRememberedAbsent, until: mark.until}
	}
	if err := s.notAsked(up, rel); err != nil {
		return turn{err: err}
	}
	f, joined := s.join(up, rel, "", false, seen)
	if f != nil && !s.awaitReady(client, f) {
		f.release()
		return turn{err: errClientGone}
	}
	return turn{f: f, joined: joined}
}

// Reasons of registryd_upstream_skipped_total.
const (
	skipUnhealthy   = "unhealthy"
	skipFailingPath = "failing_path" // the path's breaker is open (upstream.Health)
	skipNotFound    = "not_found"
)

// fetchMiss asks the registry's upstreams in position order, one GET each
// (sequential, not a parallel HEAD round: the first upstream usually has the
// file, and a GET answers in one round trip what HEAD+GET answer in two).
// The first that answers 2xx wins; 404/410 moves on; any other failure is
// remembered and moves on too. An upstream remembered not to have the file
// (the negative cache), one whose answer for it was refused lately, and an
// unhealthy one are not asked. No upstream has it: 404 when every upstream
// said so (or is remembered to have said so), otherwise a missError: 502,
// 504 when all failures were timeouts, or the 429/503 and Retry-After an
// upstream asked for, naming each failure, because a 404 would make Maven
// remember "absent" for a file an unreachable upstream may well have. skip
// is an upstream already known not to have the file (0 for none).
func (s *Server) fetchMiss(x *exchange, skip int64, seen uint64) error {
	rel := x.path.EntryRel()
	x.res = resMiss
	if x.path.Kind == maven.Checksum {
		// The file was just streamed uncached (a full disk): its digests
		// answer, as a stored entry's would (looked for on every upstream
		// before any is asked, as the lookup does), rather than fetching
		// it all again.
		for _, up := range x.reg.ups {
			if e, ok := s.uncached.recall(up.id, rel, s.now()); ok {
				x.up = up.id
				return s.serveDigest(x, &e)
			}
		}
	}
	failures := x.denied
	asked := false
	for _, up := range x.reg.ups {
		if up.id == skip {
			continue
		}
		t := s.askForClient(x.ctx, up, rel, seen)
		if t.err == errClientGone {
			return t.err
		}
		if t.err != nil {
			failures = append(failures, upstreamFailure{upstream: up.id, err: t.err})
			continue
		}
		f, joined := t.f, t.joined
		if f == nil {
			return errLookAgain
		}
		asked = true
		switch f.kind {
		case flightStreaming:
			if joined {
				x.res = resJoin
			}
			x.up = up.id
			return s.serveFlight(x, f)
		case flightNotModified:
			// Joined a revalidation of an entry that appeared since the
			// lookup: it is confirmed, serve it.
			f.release()
			if v, err := s.lookup(x.reg, rel, s.st.CacheGeneration()); err == nil && v != nil {
				x.res, x.up = resJoin, v.e.UpstreamID
				return s.serveEntryOrMiss(x, v)
			}
			continue
		case flightNotFound:
			f.release()
			failures = append(failures, upstreamFailure{upstream: up.id, err: errAbsent})
			continue
		case flightElsewhere:
			// Another node of the cluster stored the file meanwhile.
			return s.serveElsewhere(x, up, f)
		}
		if isLeaseError(f.err) {
			// No upstream may be asked without the cluster's lease, and
			// the next upstream's would fail alike: 503 now.
			f.release()
			return errLeaseAnswer
		}
		failures = append(failures, upstreamFailure{upstream: up.id, err: f.err})
		f.release()
	}
	x.miss = &missError{failures: failures}
	if !asked && x.miss.absent() && !x.miss.denied() {
		x.res = resNegative
	}
	return x.miss
}
