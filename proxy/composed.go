package proxy

// Building, serving and keeping a composed answer (merged metadata, prefix
// files) once compose.go has gathered every upstream's document.

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"

	"registryd/maven"
	"registryd/store"
	"registryd/store/objects"
)

// composedView is a composed answer, kept in memory while its inputs stand.
type composedView struct {
	gen     uint64
	inputs  [sha256.Size]byte // digest of the inputs (see compose)
	expires time.Time         // zero: while the generation stands
	body    []byte
	ctype   string
	etag    string
	lastMod string
	merge   string
	up      int64 // the one contributing upstream of a single answer
	// Rendered once: X-Registryd-Merge ("" for a single document),
	// Content-Disposition, and the merges_total counter of the outcome.
	mergeHdr, disposition string
	merges                prometheus.Counter
	// digests of body, hex
	sha1, md5, sha256, sha512 string
	contributors              []contributor     // whose entries count a download
	failures                  []upstreamFailure // every upstream without a document, and why
	denied                    []denial          // the refusals to count again on every answer
	res                       result            // how the inputs were got when built
	// refused, when set, is the answer instead of a document: these inputs
	// cannot be merged within the limits (kept like a document, so that
	// asking again does not merge again).
	refused *mergeRefusedError
}

// mergeRefusedError is a merged answer refused because its inputs cannot
// be merged within the limits (a 502).
type mergeRefusedError struct{ reason string }

func (e *mergeRefusedError) Error() string { return "merge refused: " + e.reason }

// noPrefixesError is a prefix file not composed because an upstream has
// none or cannot give it (a 404: Maven's prefix filter is then off).
type noPrefixesError struct {
	upstream int64
	reason   string
}

func (e *noPrefixesError) Error() string {
	return "no prefix file: upstream " + strconv.FormatInt(e.upstream, 10) + " " + e.reason
}

type contributor struct {
	up  int64
	rel string
}

type denial struct {
	up      *upstreamView
	verdict maven.Verdict
}

// failed returns why upstream id could not give its document to v, while
// v's partial answer stands; nil otherwise.
func (v *composedView) failed(id int64, now time.Time) error {
	if v == nil || v.merge != mergePartial || !v.fresh(now) {
		return nil
	}
	for _, f := range v.failures {
		if f.upstream == id && !isAbsent(f.err) && !isDenied(f.err) {
			return f.err
		}
	}
	return nil
}

func (v *composedView) fresh(now time.Time) bool {
	return v.expires.IsZero() || now.Before(v.expires)
}

func (v *composedView) size() int64 { return int64(len(v.body)) + 512 }

// inputClass is what an upstream gave a composed answer.
type inputClass uint8

const (
	inputAbsent inputClass = iota
	inputDocument
	inputDenied
	inputFailed
)

func (in *docInput) class() inputClass {
	switch {
	case in.err == nil:
		return inputDocument
	case isAbsent(in.err):
		return inputAbsent
	case isDenied(in.err):
		return inputDenied
	}
	return inputFailed
}

// inputsDigest identifies what a composed answer is built from: the kind,
// then per upstream in position order its id, what it gave (a document,
// none, a refusal, a failure), its document's digest and the fingerprint of
// its rules (which drop versions). Equal digests: the same answer.
func inputsDigest(k composeKind, ins []docInput) [sha256.Size]byte {
	h := sha256.New()
	var b [9]byte
	b[0] = byte(k)
	h.Write(b[:1])
	for i := range ins {
		in := &ins[i]
		binary.BigEndian.PutUint64(b[:8], uint64(in.up.id))
		b[8] = byte(in.class())
		h.Write(b[:])
		if in.err == nil {
			io.WriteString(h, in.digest)
			io.WriteString(h, in.up.rulesKey)
		}
		h.Write([]byte{0})
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// compose builds the answer out of the inputs; prev, the view kept from
// before, is reused when its inputs are the same (a new cache generation
// seldom changes a document).
func (s *engine) compose(x *request, k composeKind, ins []docInput, prev *composedView, gen uint64, now time.Time) (*composedView, error) {
	v := &composedView{gen: gen, inputs: inputsDigest(k, ins), res: resHit}
	for i := range ins {
		in := &ins[i]
		switch {
		case in.fetched:
			v.res = resMiss
		case in.stale && v.res == resHit:
			v.res = resStale
		}
		if !in.expires.IsZero() && (v.expires.IsZero() || in.expires.Before(v.expires)) {
			v.expires = in.expires
		}
		if de, ok := in.err.(*deniedError); ok {
			v.denied = append(v.denied, denial{up: in.up, verdict: de.v})
		}
	}
	if prev != nil && prev.inputs == v.inputs {
		// The same documents: the same bytes.
		return v.from(prev), nil
	}
	// Requests for the same answer out of the same documents at once (a
	// herd after a new release changed a document) wait for one merge.
	key := pendingKey{entryKey{x.reg.id, strings.Clone(x.path.EntryRel())}, v.inputs}
	p, lead := s.composed.pending(key)
	if !lead {
		<-p.done
		if p.err != nil {
			return nil, p.err
		}
		return v.from(p.v), nil
	}
	defer func() { s.composed.settle(key, p) }()
	p.v, p.err = s.build(x, k, ins, v, now)
	return p.v, p.err
}

// from is the answer built before out of the same documents, for v's
// generation, expiry and request.
func (v *composedView) from(built *composedView) *composedView {
	w := *built
	w.gen, w.expires, w.res, w.denied = v.gen, v.expires, v.res, v.denied
	return &w
}

// build merges the inputs into v, within the room for merges.
func (s *engine) build(x *request, k composeKind, ins []docInput, v *composedView, now time.Time) (*composedView, error) {
	// The merge weighs the documents it will read: one over
	// metadata.max_document_bytes is refused unread (docInput.read).
	var weight int64
	for i := range ins {
		if in := &ins[i]; in.err == nil && in.size <= s.opts.Metadata.MaxDocumentBytes {
			weight += in.size
		}
	}
	if !s.merging.fits(weight) {
		v.refused = &mergeRefusedError{reason: "the upstreams' documents (" +
			strconv.FormatInt(weight, 10) + " bytes) are too large to merge (metadata.max_merging_bytes)"}
		return s.refusedView(x, v), nil
	}
	release, err := s.merging.acquire(weight)
	defer release()
	if err != nil {
		return nil, err
	}
	switch k {
	case composeMetadata:
		err = s.mergeMetadata(x, v, ins)
	case composePrefixes:
		err = s.mergePrefixes(v, ins)
	}
	if v.refused != nil {
		return s.refusedView(x, v), nil
	}
	if err != nil {
		return nil, err
	}
	if v.merge == mergePartial {
		pt := now.Add(s.opts.Metadata.PartialTTL)
		if v.expires.IsZero() || pt.Before(v.expires) {
			v.expires = pt
		}
	}
	v.digest()
	if v.etag == "" { // the single document's own ETag is set already
		v.etag = `"m` + hex.EncodeToString(v.inputs[:20]) + `"`
	}
	var newest time.Time
	for i := range ins {
		if in := &ins[i]; in.err == nil {
			if in.updated.After(newest) {
				newest = in.updated
			}
			if in.entry != "" {
				v.contributors = append(v.contributors, contributor{up: in.up.id, rel: in.entry})
			}
		}
	}
	v.lastMod = httpDate(newest)
	if v.merge != mergeSingle {
		v.mergeHdr = mergeHeader(v)
	}
	p := x.path.EntryRel()
	v.disposition = dispositionStart + p[strings.LastIndexByte(p, '/')+1:] + `"`
	v.merges = s.met.merges.WithLabelValues(idLabel(x.reg.id), v.merge)
	return v, nil
}

// refusedView completes v, whose inputs cannot be merged within the limits
// (v.refused), as an answer kept while they stand.
func (s *engine) refusedView(x *request, v *composedView) *composedView {
	v.merge = mergeNone
	v.merges = s.met.merges.WithLabelValues(idLabel(x.reg.id), mergeNone)
	s.log.Warn("merged metadata refused", "registry", x.reg.id, "path", x.path.EntryRel(), "reason", v.refused.reason)
	return v
}

// docLimits bound an upstream's maven-metadata.xml and a merged one.
func (s *engine) docLimits() maven.MetadataLimits {
	m := s.opts.Metadata
	return maven.MetadataLimits{Bytes: m.MaxDocumentBytes, Versions: m.MaxVersions, Elements: m.MaxElements}
}

// mergeMetadata merges the maven-metadata.xml documents. An upstream's
// versions that its rules refuse are left out of what it contributes; a
// document that is malformed, over the limits or for other coordinates
// than the path is that upstream's failure. One document, nothing left out
// and no upstream failed: its own bytes. A merged answer over the limits
// is refused (v.refused).
func (s *engine) mergeMetadata(x *request, v *composedView, ins []docInput) error {
	lim := s.docLimits()
	docs := make([]*maven.Metadata, len(ins))
	var c maven.Coordinates
	if x.reg.hasRules {
		c = maven.RuleCoordinates(x.path)
	}
	found, single := 0, -1
	for i := range ins {
		in := &ins[i]
		if in.err == nil {
			body, err := in.read(s)
			if err == nil {
				docs[i], err = maven.ParseMetadataBytes(body, lim)
			}
			if err == nil {
				err = docs[i].CheckPath(x.path)
			}
			if err != nil {
				docs[i] = nil
				in.err = s.badInput(in, err)
			} else {
				if found > 0 {
					// Only a single document's own bytes are served:
					// with two, neither is needed past its parse.
					ins[single].body, in.body = nil, nil
				}
				found, single = found+1, i
			}
		}
		if in.err != nil {
			v.failures = append(v.failures, upstreamFailure{upstream: in.up.id, err: in.err})
		}
	}
	if found == 0 {
		x.miss = &missError{failures: v.failures}
		return x.miss
	}
	v.merge = mergeComplete
	for _, f := range v.failures {
		if !isAbsent(f.err) && !isDenied(f.err) {
			v.merge = mergePartial
		}
	}
	dropped := false
	keep := func(i int, version string) bool {
		if c.ArtifactID == "" || ins[i].up.rules == nil || ins[i].up.rules.AllowsVersion(c, version) {
			return true
		}
		dropped = true
		return false
	}
	merged := maven.MergeMetadata(docs, keep)
	v.ctype = maven.ContentType(maven.MetadataFile)
	if found == 1 && v.merge == mergeComplete && !dropped {
		in := &ins[single]
		v.merge, v.body, v.up = mergeSingle, in.body, in.up.id
		v.etag = `"` + in.digest + `"`
		return nil
	}
	body, err := merged.MarshalLimited(lim)
	if err != nil {
		var me *maven.MetadataError
		reason := "over the limits"
		if errors.As(err, &me) {
			reason = me.Reason()
		}
		v.refused = &mergeRefusedError{reason: "the merged maven-metadata.xml would be too large: " + reason}
		return nil
	}
	v.body = body
	return nil
}

// mergePrefixes answers the union of the upstreams' prefix files, or 404
// when one has none or cannot give it: Maven's prefix filter refuses every
// file outside the list, so a list missing an upstream's prefixes would
// make it refuse files that upstream holds, where a 404 turns the filter
// off for the registry.
func (s *engine) mergePrefixes(v *composedView, ins []docInput) error {
	max := s.opts.Metadata.MaxDocumentBytes
	lists := make([][]string, 0, len(ins))
	for i := range ins {
		in := &ins[i]
		var list []string
		body, err := in.read(s)
		if err == nil {
			list, err = maven.ParsePrefixes(bytes.NewReader(body), max)
		}
		if err != nil && in.err == nil {
			err = s.badInput(in, err)
		}
		if err != nil {
			return &noPrefixesError{upstream: in.up.id, reason: prefixAbsence(err)}
		}
		lists = append(lists, list)
	}
	v.merge, v.ctype = mergeComplete, maven.ContentType(maven.PrefixesFile)
	v.body = maven.MergePrefixes(lists)
	return nil
}

func prefixAbsence(err error) string {
	if isAbsent(err) {
		return "has none"
	}
	return "could not give one: " + failureReason(docError(err))
}

// badInput turns an upstream document that could not be read or merged
// into that upstream's failure, remembered by the document's digest for
// metadata.partial_ttl (see storedDoc). A blob file that has gone is
// removed from the index, so the next answer fetches the document again.
func (s *engine) badInput(in *docInput, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		s.log.Error("a cached document's blob file is missing; fetching it again",
			"upstream", in.up.id, "path", in.entry, "blob", in.digest)
		if in.entry != "" {
			if derr := s.st.DeleteCacheEntry(in.up.id, in.entry); derr != nil && !errors.Is(derr, store.ErrNotFound) {
				s.log.Warn("removing the entry of a missing blob", "upstream", in.up.id, "path", in.entry, "err", derr)
			}
		}
		return errBlobGone
	}
	if errors.Is(err, objects.ErrUnavailable) {
		// The bucket is away: nothing is wrong with the document, so
		// nothing is remembered against it.
		return err
	}
	err = docError(err)
	s.log.Warn("upstream document not merged", "upstream", in.up.id, "path", in.entry, "reason", failureReason(err))
	s.composed.rememberBad(in.digest, err, s.now().Add(s.opts.Metadata.PartialTTL))
	return err
}

// docError is an upstream document that could not be read, parsed or
// merged, as that upstream's failure.
func docError(err error) error {
	var kind string
	switch {
	case errors.Is(err, maven.ErrMetadataMisplaced):
		kind = "document for other coordinates: "
	case errors.Is(err, maven.ErrMetadataTooLarge):
		kind = "document too large: "
	case errors.Is(err, maven.ErrBadMetadata) || errors.Is(err, maven.ErrBadPrefixes):
		kind = "malformed document: "
	default:
		return err
	}
	return &refusedError{label: refusedAnswer, reason: kind + docReason(err)}
}

// docReason is the parser's client-safe reason, without its package prefix.
func docReason(err error) string {
	r := err.Error()
	if i := strings.LastIndex(r, ": "); i >= 0 && i+2 < len(r) {
		return r[i+2:]
	}
	return r
}

func (v *composedView) digest() {
	hs := [...]hash.Hash{sha1.New(), md5.New(), sha256.New(), sha512.New()}
	out := [...]*string{&v.sha1, &v.md5, &v.sha256, &v.sha512}
	for i, h := range hs {
		h.Write(v.body)
		*out[i] = hex.EncodeToString(h.Sum(nil))
	}
}

// countComposed counts a download of every entry that went into v (GETs
// only, as for any file: not HEAD, not 304).
func (s *engine) countComposed(v *composedView) {
	now := s.now()
	for _, c := range v.contributors {
		s.downloads.add(c.up, c.rel, now)
	}
}

// mergeHeader is X-Registryd-Merge: "complete", or "partial; missing=2,5"
// naming the upstreams that failed.
func mergeHeader(v *composedView) string {
	if v.merge != mergePartial {
		return v.merge
	}
	var b strings.Builder
	b.WriteString("partial; missing=")
	n := 0
	for _, f := range v.failures {
		if isAbsent(f.err) || isDenied(f.err) {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(f.upstream, 10))
		n++
	}
	return b.String()
}

// --- the composed answers kept in memory ---

// composedCache holds composed answers by (registry, path), bounded by
// metadata.memory_bytes; each is checked against the cache generation and
// its expiry on use.
type composedCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[entryKey, *composedView]
	bytes int64
	max   int64
	// bad are upstream documents (by SHA-256) that could not be merged.
	bad *simplelru.LRU[string, badDoc]
	// building are the compositions in progress.
	building map[pendingKey]*pendingCompose
	hooks    *Hooks // OnComposeFollow (a test hook)
}

// pendingKey is a composition in progress: the answer, and the documents
// it is built from.
type pendingKey struct {
	entryKey
	inputs [sha256.Size]byte
}

// pendingCompose is the outcome of a composition in progress, once done is
// closed.
type pendingCompose struct {
	done chan struct{}
	v    *composedView
	err  error
}

// pending returns the composition in progress for k, and whether the
// caller is to build it (lead): then it must settle it.
func (c *composedCache) pending(k pendingKey) (p *pendingCompose, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.building[k]; ok {
		if c.hooks.OnComposeFollow != nil {
			c.hooks.OnComposeFollow()
		}
		return p, false
	}
	if c.building == nil {
		c.building = make(map[pendingKey]*pendingCompose)
	}
	p = &pendingCompose{done: make(chan struct{})}
	c.building[k] = p
	return p, true
}

// settle publishes the outcome of a composition (p.v, p.err) to those
// waiting for it.
func (c *composedCache) settle(k pendingKey, p *pendingCompose) {
	c.mu.Lock()
	delete(c.building, k)
	c.mu.Unlock()
	if p.v == nil && p.err == nil {
		p.err = errComposeAborted
	}
	close(p.done)
}

// errComposeAborted is a composition whose builder ended without an outcome
// (a panic, recovered by the handler).
var errComposeAborted = errors.New("the merge these documents waited for did not finish")

// badDoc is why a document could not be merged, and until when that
// stands without asking its upstream again.
type badDoc struct {
	err   error
	until time.Time
}

// rememberBad records a document that could not be merged.
func (c *composedCache) rememberBad(digest string, err error, until time.Time) {
	if digest == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad.Add(digest, badDoc{err: err, until: until})
}

// badDoc returns the failure of a document known not to merge while it
// stands (nil after), and whether the document is known bad at all: one
// whose failure has expired must be revalidated before it is used again.
func (c *composedCache) badDoc(digest string, now time.Time) (*badDoc, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.bad.Get(digest)
	if !ok {
		return nil, false
	}
	if now.Before(b.until) {
		return &b, true
	}
	c.bad.Remove(digest)
	return nil, true
}

// newComposedCache keeps answers of at most max bytes in all, and at most
// entries answers (and bad documents) whatever their size
// (Options.Memory.Composed).
func newComposedCache(max int64, entries int) (*composedCache, error) {
	c := &composedCache{max: max}
	var err error
	c.lru, err = simplelru.NewLRU[entryKey, *composedView](entries, func(_ entryKey, v *composedView) {
		c.bytes -= v.size()
	})
	if err != nil {
		return nil, err
	}
	c.bad, err = simplelru.NewLRU[string, badDoc](entries, nil)
	return c, err
}

// fill is the answers kept and their bytes, for metrics.
func (c *composedCache) fill() (n int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}

func (c *composedCache) get(k entryKey) *composedView {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, _ := c.lru.Get(k)
	return v
}

func (c *composedCache) add(k entryKey, v *composedView) {
	if v.size() > c.max {
		return
	}
	k.rel = strings.Clone(k.rel) // kept: the caller's may alias the request's buffer
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k) // its eviction callback takes the old answer's bytes off
	c.lru.Add(k, v)
	c.bytes += v.size()
	for c.bytes > c.max {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}
