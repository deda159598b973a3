package proxy

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"registryd/auth"
	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// Resolution: what answers a download, decided without the request (the
// exchange carries the caller and its connection). download.go parses,
// authenticates and serves what is decided here.

// request is one download on its way through resolution: what the metrics
// and the access log record of it. Resolution reads no HTTP request: only
// the caller (who, remote: whom a refusal is charged to) and its
// connection (conn: whether the client is still there while a fill is
// awaited).
type request struct {
	who    auth.Principal
	remote net.Addr      // the client's address; nil for none
	conn   net.Conn      // the client's connection; nil for none (a merge's, a test's)
	reg    *registryView // nil until the registry is resolved and readable
	path   maven.Path
	res    result
	up     int64      // the upstream whose file, or stored copy, was served; 0 for none
	miss   *missError // why no upstream served the file, when none did
	// denied are the upstreams whose rules refused the file (see screen).
	denied []upstreamFailure
	// merge is how a merged document was built ("complete", "partial",
	// "single"); "" for any other answer. For a partial merge, miss holds
	// the upstreams that failed.
	merge string
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
func (s *engine) registry(id int64, gen uint64) (*registryView, error) {
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
	prev, _ := s.regs.Peek(id)
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
		v.ups = append(v.ups, sameView(prev, &upstreamView{
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
		}))
		s.met.series.seenUpstream(u.ID)
		s.urls.note(s.health, u.ID, u.URL)
		v.upIDs = append(v.upIDs, u.ID)
	}
	s.regs.Add(id, v)
	return v, nil
}

// sameView returns the previous registry view's view of u's upstream when
// it equals u, else u. Registry views are rebuilt at every change of the
// catalog, and every cached entry view points at the upstream view of its
// time: without this, the entry cache (32,768 views) would come to hold
// that many copies of the same upstream's view, strings and all (the soak
// saw the live heap grow 7 MB a minute with every cache in memory full).
func sameView(prev *registryView, u *upstreamView) *upstreamView {
	if prev != nil {
		if old := prev.upstream(u.id); old != nil && *old == *u {
			return old
		}
	}
	return u
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
func (s *engine) lookup(reg *registryView, rel string, gen uint64) (*entryView, error) {
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

// dispositionStart opens the Content-Disposition of a file, whose name
// follows (then a closing quote).
const dispositionStart = "attachment; filename=\""

// newEntryView is the view of e, an entry of up stored under rel, with
// its response headers formatted (gen 0: for the caller to set).
func newEntryView(s *engine, up *upstreamView, rel string, e store.CacheEntry) *entryView {
	v := &entryView{found: true, key: rel, e: e, up: up}
	v.blob = s.blobs.Path(e.SHA256)
	v.etag = `"` + e.SHA256 + `"`
	v.lastModified = httpDate(e.UpdatedAt)
	v.disposition = dispositionStart + rel[strings.LastIndexByte(rel, '/')+1:] + `"`
	v.contentType = e.ContentType
	if v.contentType == "" {
		v.contentType = maven.ContentType(rel)
	}
	return v
}

// httpDate formats t as HTTP dates are (IMF-fixdate, RFC 9110), as
// fasthttp.AppendHTTPDate does.
func httpDate(t time.Time) string { return t.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT") }

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

// maxLookups bounds how often one request looks the cache up again because
// the cache changed between its lookup and its fetch (see join).
const maxLookups = 3

// answer is what resolution decided for a download, as data the listener
// renders (serve): a stored entry, a flight to stream behind its fill, or
// the digests of a file streamed uncached. Resolution never writes a
// response; serving never asks an upstream.
type answer struct {
	entry  *entryView    // a stored entry (hit, stale, revalidated, stored elsewhere)
	flight *flight       // a fill to stream (held: serving releases it)
	doc    *composedView // a composed document (merged metadata, prefix files)
	// uncached are the digests of a file streamed uncached (a full disk),
	// for its checksum sidecars.
	uncached *store.CacheEntry
	// seen is the cache generation a fetch asks with when entry's blob is
	// found missing while serving (blobGone).
	seen uint64
	// elsewhere: entry was stored by another node of the cluster just now;
	// its blob missing here too is a 503, not a fetch (errElsewhereGone).
	elsewhere bool
}

// errBlobGone means the index points at a blob file that is not there
// (removed by hand, restored from a partial backup): serving reports it
// back to resolution (blobGone), which fetches the file again.
var errBlobGone = errors.New("blob file missing")

// blobGone resolves x again once the blob of a's entry was found missing
// while serving it (removed by hand, damaged disk, or an object gone from
// the bucket): the file is fetched again. An entry another node stored
// just now is not: its blob missing here too means it went meanwhile, and
// a fetch would find the entry again.
func (s *engine) blobGone(x *request, a answer) (answer, error) {
	if a.elsewhere {
		return answer{}, errElsewhereGone
	}
	b, err := s.fetchMiss(x, 0, a.seen)
	if err == errLookAgain {
		return s.resolve(x, s.st.CacheGeneration())
	}
	return b, err
}

// resolveDownload resolves x, its registry readable and its path
// classified: a composed document (merged metadata, prefix files), or the
// file from the cache or the upstreams that x's rules leave (screen).
func (s *engine) resolveDownload(x *request, gen uint64) (answer, error) {
	if k := composedKind(x); k != composeNone {
		v, err := s.resolveComposed(x, k, gen)
		return answer{doc: v}, err
	}
	if x.reg = s.screen(x); len(x.reg.ups) == 0 {
		x.miss = &missError{failures: x.denied}
		return answer{}, x.miss
	}
	return s.resolve(x, gen)
}

// resolve answers x from the cache or the upstreams. A lookup that missed
// while a flight for the file was storing it finds no flight to join
// afterwards; join then says to look again (errLookAgain) rather than fetch
// the file a second time.
func (s *engine) resolve(x *request, gen uint64) (answer, error) {
	for attempt := 1; ; attempt++ {
		seen := gen
		if attempt == maxLookups {
			seen = anyGen
		}
		a, err := s.resolveOnce(x, gen, seen)
		if err != errLookAgain {
			return a, err
		}
		gen = s.st.CacheGeneration()
	}
}

func (s *engine) resolveOnce(x *request, gen, seen uint64) (answer, error) {
	v, err := s.lookup(x.reg, x.path.EntryRel(), gen)
	if err != nil {
		return answer{}, err
	}
	if v == nil {
		return s.fetchMiss(x, 0, seen)
	}
	if v.fresh(x.path.EntryKind(), s.now()) {
		x.res, x.up = resHit, v.e.UpstreamID
		return answer{entry: v, seen: seen}, nil
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
func (s *engine) revalidate(x *request, v *entryView, seen uint64) (answer, error) {
	rel := x.path.EntryRel()
	x.up = v.up.id
	stale := answer{entry: v, seen: anyGen}
	if s.keepStale(v.up, rel) {
		x.res = resStale
		return stale, nil
	}
	f, joined := s.join(v.up, rel, v.e.ETag, true, seen)
	if f == nil {
		return answer{}, errLookAgain
	}
	if !s.awaitReady(x.conn, f) {
		f.release()
		return answer{}, errClientGone
	}
	switch o := s.settle(f, true); o.kind {
	case flightStreaming:
		x.res = joinedOr(joined, resMiss)
		return answer{flight: f}, nil
	case flightNotModified:
		x.res = joinedOr(joined, resRevalidated)
		return stale, nil
	case flightElsewhere:
		// Another node of the cluster revalidated (or stored) the file
		// meanwhile: its entry is the answer.
		return s.elsewhere(x, v.up, o.entry), nil
	case flightNotFound:
		x.up = 0
		return s.fetchMiss(x, v.up.id, anyGen)
	default:
		x.res = resStale
		s.log.Warn("revalidation failed; serving the stale copy", "registry", x.reg.id, "upstream", v.up.id,
			"path", v.e.RelativePath, "err", failureReason(o.err))
		return stale, nil
	}
}

// joinedOr is resJoin for a request that joined a flight, else r.
func joinedOr(joined bool, r result) result {
	if joined {
		return resJoin
	}
	return r
}

// elsewhere is the answer of an entry another node of the cluster stored
// (a flightElsewhere's), from upstream up, served as a hit would be.
func (s *engine) elsewhere(x *request, up *upstreamView, e store.CacheEntry) answer {
	x.res, x.up = resJoin, up.id
	return answer{entry: newEntryView(s, up, x.path.EntryRel(), e), elsewhere: true}
}

// keepStale reports whether a stale entry of up is served as it is, without
// asking up: its last answer for rel was refused lately, it is unhealthy, or
// rel failed on it lately (its path breaker is open).
func (s *engine) keepStale(up *upstreamView, rel string) bool {
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
func (s *engine) askFor(up *upstreamView, rel string, seen uint64) turn {
	return s.askForClient(nil, up, rel, seen)
}

// askForClient is askFor for the request of client, which may go away while
// the flight waits (awaitReady): the turn's error is then errClientGone.
func (s *engine) askForClient(client net.Conn, up *upstreamView, rel string, seen uint64) turn {
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
func (s *engine) fetchMiss(x *request, skip int64, seen uint64) (answer, error) {
	rel := x.path.EntryRel()
	x.res = resMiss
	if a, ok := s.uncachedDigests(x, rel); ok {
		return a, nil
	}
	failures := x.denied
	asked := false
	for _, up := range x.reg.ups {
		if up.id == skip {
			continue
		}
		t := s.askForClient(x.conn, up, rel, seen)
		if t.err == errClientGone {
			return answer{}, t.err
		}
		if t.err != nil {
			failures = append(failures, upstreamFailure{upstream: up.id, err: t.err})
			continue
		}
		if t.f == nil {
			return answer{}, errLookAgain
		}
		asked = true
		switch o := s.settle(t.f, false); o.kind {
		case flightStreaming:
			x.res, x.up = joinedOr(t.joined, resMiss), up.id
			return answer{flight: t.f}, nil
		case flightNotModified:
			// Joined a revalidation of an entry that appeared since the
			// lookup: it is confirmed, serve it.
			if v, err := s.lookup(x.reg, rel, s.st.CacheGeneration()); err == nil && v != nil {
				x.res, x.up = resJoin, v.e.UpstreamID
				return answer{entry: v, seen: anyGen}, nil
			}
		case flightNotFound:
			failures = append(failures, upstreamFailure{upstream: up.id, err: errAbsent})
		case flightElsewhere:
			// Another node of the cluster stored the file meanwhile.
			return s.elsewhere(x, up, o.entry), nil
		default:
			if isLeaseError(o.err) {
				// No upstream may be asked without the cluster's lease, and
				// the next upstream's would fail alike: 503 now.
				return answer{}, o.err
			}
			failures = append(failures, upstreamFailure{upstream: up.id, err: o.err})
		}
	}
	x.miss = &missError{failures: failures}
	if !asked && x.miss.absent() && !x.miss.denied() {
		x.res = resNegative
	}
	return answer{}, x.miss
}

// uncachedDigests answers a checksum sidecar of a file just streamed
// uncached (a full disk) from its digests, as a stored entry's would (looked
// for on every upstream before any is asked, as the lookup does), rather
// than fetching it all again.
func (s *engine) uncachedDigests(x *request, rel string) (answer, bool) {
	if x.path.Kind != maven.Checksum {
		return answer{}, false
	}
	for _, up := range x.reg.ups {
		if e, ok := s.uncached.recall(up.id, rel, s.now()); ok {
			x.up = up.id
			return answer{uncached: &e}, true
		}
	}
	return answer{}, false
}
