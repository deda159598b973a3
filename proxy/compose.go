package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
)

// Composed documents: a registry answers maven-metadata.xml (artifact and
// group level, when its merge_metadata is on) and .meta/prefixes.txt out of
// every upstream's document, not the first upstream's, so a build sees one
// repository (docs/api.md, "Merged metadata").
//
// Each upstream's document is an ordinary cache entry of that upstream,
// got the way any file is (fresh entry, revalidation, fill, negative cache,
// health, the upstream's rules), all upstreams at once. The answer is built
// from them in memory and kept there (composedCache) while its inputs stand:
// the same cache generation, and none of them due for a check. Its bytes
// depend only on the inputs, its ETag is derived from them, and its
// checksum sidecars are digests of exactly those bytes.

type composeKind uint8

const (
	composeNone     composeKind = iota
	composeMetadata             // maven-metadata.xml: merged (maven.MergeMetadata)
	composePrefixes             // .meta/prefixes.txt: the union, or 404
)

// How a composed answer was built (the X-Registryd-Merge header, the access
// log's merge field, registryd_metadata_merges_total's outcome).
const (
	mergeComplete = "complete" // every upstream that has the document contributed
	mergePartial  = "partial"  // an upstream failed: its document is missing
	mergeSingle   = "single"   // one upstream had it: its own bytes, unchanged
	mergeNone     = "none"     // no answer could be built (metric only)
)

var hdrMerge = []byte("X-Registryd-Merge")

// composedKind says whether x's file is composed out of the upstreams'.
// Version-level metadata (g/a/1.0-SNAPSHOT/maven-metadata.xml) is not: its
// timestamps name files on the one upstream that wrote it, so the first
// upstream that has it answers, as for any file.
func composedKind(x *request) composeKind {
	p := x.path
	switch {
	case p.EntryRel() == maven.PrefixesFile:
		return composePrefixes
	case p.EntryKind() == maven.MetadataKind && p.Version == "" && x.reg.merge:
		return composeMetadata
	}
	return composeNone
}

// docInput is one upstream's document for a composed answer, or why there
// is none (err: absent, denied by its rules, or a failure).
type docInput struct {
	up      *upstreamView
	err     error
	digest  string    // SHA-256 of the document
	size    int64     // its length
	blob    string    // its blob file, while body is not read
	body    []byte    // the document, once read
	updated time.Time // when its entry was stored (Last-Modified)
	entry   string    // its entry's path (with the leading slash), for download counts; "" when not stored
	// expires is when this input must be looked at again (its validity
	// ends, its 404 is forgotten, a failed upstream is worth asking again);
	// zero for never.
	expires time.Time
	fetched bool // its upstream was asked for this answer
	stale   bool // a stale copy, its upstream down or failing
	verdict maven.Verdict
}

func (in *docInput) stored(e store.CacheEntry, blobs *blob.Store) {
	in.err, in.digest, in.size, in.blob = nil, e.SHA256, e.Size, blobs.Path(e.SHA256)
	in.updated, in.entry = e.UpdatedAt, e.RelativePath
}

// until lowers the input's expiry to t.
func (in *docInput) until(t time.Time) {
	if in.expires.IsZero() || t.Before(in.expires) {
		in.expires = t
	}
}

// resolveComposed resolves x to a composed document, for serveComposed.
func (s *engine) resolveComposed(x *request, k composeKind, gen uint64) (*composedView, error) {
	rel := x.path.EntryRel()
	key := entryKey{x.reg.id, rel}
	now := s.now()
	v := s.composed.get(key)
	x.res = resHit
	if v == nil || v.gen != gen || !v.fresh(now) {
		ins := s.gather(x, k, rel, gen, v, now)
		var err error
		if v, err = s.compose(x, k, ins, v, gen, now); err != nil {
			for i := range ins {
				if de, ok := ins[i].err.(*deniedError); ok {
					s.deny(x, ins[i].up, de.v)
				}
			}
			s.met.merges.WithLabelValues(idLabel(x.reg.id), mergeNone).Inc()
			return nil, err
		}
		s.composed.add(key, v)
		x.res = v.res
	}
	for _, d := range v.denied {
		s.deny(x, d.up, d.verdict)
	}
	return v, nil
}

// gather gets every upstream's document at once, in position order.
// Upstreams whose rules refuse the document's coordinates are not asked,
// nor, while the partial answer built without them stands (prev, until
// metadata.partial_ttl), upstreams that failed: the cache generation moves
// with every fill anywhere, and asking a failing upstream again each time
// would defeat the point of keeping the partial answer.
func (s *engine) gather(x *request, k composeKind, rel string, gen uint64, prev *composedView, now time.Time) []docInput {
	reg := x.reg
	ins := make([]docInput, len(reg.ups))
	var c maven.Coordinates
	if reg.hasRules {
		c = maven.RuleCoordinates(x.path)
	}
	meta := k == composeMetadata
	var wg sync.WaitGroup
	for i, u := range reg.ups {
		in := &ins[i]
		in.up = u
		if v := verdict(u.rules, x.path, c); !v.Allowed {
			// The denial is kept in the composed view (counted and audited
			// again on every answer from it): its value, a view of the
			// request path, must not be.
			v.Value = strings.Clone(v.Value)
			in.err, in.verdict = &deniedError{v}, v
			continue
		}
		if err := prev.failed(u.id, now); err != nil {
			in.err = err
			in.until(prev.expires)
			continue
		}
		if len(reg.ups) == 1 {
			s.upstreamDoc(in, rel, meta, gen)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.upstreamDoc(in, rel, meta, gen)
		}()
	}
	wg.Wait()
	return ins
}

// upstreamDoc gets one upstream's document as a download of the file from
// that upstream alone would: its fresh entry; a stale one revalidated (the
// stale copy when the upstream fails or is down); else a fill, unless the
// upstream is remembered not to have it or is unhealthy.
func (s *engine) upstreamDoc(in *docInput, rel string, meta bool, gen uint64) {
	for attempt := 1; ; attempt++ {
		seen := gen
		if attempt > 1 {
			seen = s.st.CacheGeneration()
		}
		if attempt >= maxLookups {
			seen = anyGen
		}
		if attempt > 2*maxLookups {
			// The entry keeps changing under the lookup; give up on this
			// upstream for this answer rather than spin.
			in.err = errLookAgain
			return
		}
		e, err := s.st.CacheEntry(in.up.id, "/"+rel)
		var done bool
		switch {
		case err == nil && blob.ValidDigest(e.SHA256):
			done = s.storedDoc(in, rel, e, meta, seen)
		case err == nil || errors.Is(err, store.ErrNotFound):
			done = s.fetchDoc(in, rel, meta, seen)
		default:
			in.err, done = err, true
		}
		if done {
			return
		}
	}
}

// storedDoc handles an upstream that has an entry for the document; false
// means look again (the cache changed meanwhile).
func (s *engine) storedDoc(in *docInput, rel string, e store.CacheEntry, meta bool, seen uint64) bool {
	up, now := in.up, s.now()
	validity := up.validity
	if meta {
		validity = up.metaValidity
	}
	// A stored document that could not be merged (malformed, too large) is
	// that upstream's failure until metadata.partial_ttl has passed; then it
	// is revalidated, however fresh, so a repaired upstream is seen.
	bad, badKnown := s.composed.badDoc(e.SHA256, now)
	if bad != nil {
		in.err = bad.err
		in.until(bad.until)
		return true
	}
	if !badKnown && !e.Invalidated && (validity == 0 || now.Before(e.CheckedAt.Add(validity))) {
		in.stored(e, s.blobs)
		if validity > 0 {
			in.until(e.CheckedAt.Add(validity))
		}
		return true
	}
	staleCopy := func() bool {
		in.stored(e, s.blobs)
		in.stale = true
		in.until(now.Add(s.opts.Metadata.PartialTTL))
		return true
	}
	if s.keepStale(up, rel) {
		return staleCopy()
	}
	f, _ := s.join(up, rel, e.ETag, true, seen)
	if f == nil {
		return false
	}
	in.fetched = true
	<-f.ready
	switch o := s.settle(f, true); o.kind {
	case flightStreaming:
		return s.flightDoc(in, f)
	case flightNotModified:
		in.stored(e, s.blobs)
		if validity > 0 {
			in.until(now.Add(validity))
		}
		return true
	case flightNotFound:
		s.absentDoc(in, errAbsent, meta, now)
		return true
	case flightElsewhere:
		// Revalidated by another node of the cluster: read it again.
		return false
	default:
		s.log.Warn("revalidation failed; merging the stale copy", "upstream", up.id, "path", e.RelativePath,
			"err", failureReason(o.err))
	}
	return staleCopy()
}

// fetchDoc handles an upstream without an entry for the document; false
// means look again.
func (s *engine) fetchDoc(in *docInput, rel string, meta bool, seen uint64) bool {
	now := s.now()
	t := s.askFor(in.up, rel, seen)
	if t.err != nil {
		in.err = t.err
		if t.until.IsZero() {
			t.until = now.Add(s.opts.Metadata.PartialTTL)
		}
		in.until(t.until)
		return true
	}
	f := t.f
	if f == nil {
		return false
	}
	in.fetched = true
	switch o := s.settle(f, false); o.kind {
	case flightStreaming:
		return s.flightDoc(in, f)
	case flightNotModified, flightElsewhere:
		// Joined the revalidation of an entry stored since the lookup, or
		// another node of the cluster stored it: read it again.
		return false
	case flightNotFound:
		s.absentDoc(in, errAbsent, meta, now)
	default:
		in.err = o.err
		in.until(now.Add(s.opts.Metadata.PartialTTL))
	}
	return true
}

// absentDoc records an upstream without the document, for as long as its
// 404 is remembered.
func (s *engine) absentDoc(in *docInput, err error, meta bool, now time.Time) {
	ttl := in.up.notFoundTTL
	if meta {
		ttl = in.up.metaNotFoundTTL
	}
	in.err = err
	in.until(now.Add(ttl))
}

// errDocTooLarge is an upstream document past metadata.max_document_bytes.
var errDocTooLarge = &refusedError{label: refusedAnswer, reason: "document larger than metadata.max_document_bytes"}

// fillLimit is the longest body a fill of rel takes, and its failure past
// it: cache.max_file_bytes, and for the documents merges read (every
// maven-metadata.xml and prefix file) metadata.max_document_bytes when
// lower. A larger document is not downloaded past the limit nor stored:
// its fill is refused as that upstream's answer (remembered a while, so it
// is not fetched again meanwhile), whoever asked for it.
func (s *engine) fillLimit(rel string) (int64, error) {
	if max := s.opts.Metadata.MaxDocumentBytes; max < s.maxFile && (maven.IsMetadata(rel) || rel == maven.PrefixesFile) {
		return max, errDocTooLarge
	}
	return s.maxFile, errTooLarge
}

// unaccounted stands in for the served-bytes counter of a flight read for a
// merge: the merged answer counts what it serves.
var unaccounted = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})

// flightDoc takes a streaming flight's document. A body on its way to the
// cache is not read here: its entry is waited for and its blob read by the
// merge, under metadata.max_merging_bytes (requests that gather the same
// document at once would each hold a copy otherwise). A small body read
// whole by the fill is shared as it is; only an uncached one (a full disk)
// is read from the flight, the one way to have it.
func (s *engine) flightDoc(in *docInput, f *flight) bool {
	max := s.opts.Metadata.MaxDocumentBytes
	now := s.now()
	if f.size > max {
		f.release()
		in.err = errDocTooLarge
		in.until(now.Add(s.opts.Metadata.PartialTTL))
		return true
	}
	if f.mem == nil && !f.pass.live.Load() {
		// As awaitResult, but the hold is kept until the outcome is known:
		// a body that was whole but not stored (cache.max_pending_stores
		// turned its store away, or the disk filled at its store) is still
		// in the flight's temp file, open while the flight is held, and is
		// read from there below.
		f.pass.passive.Add(1)
		f.passReleased(false)
		e, err := f.result()
		f.pass.passive.Add(-1)
		if !errors.Is(err, errNotCached) || f.pass.live.Load() || f.file == nil {
			f.release()
			if err != nil {
				// Stored nothing: broke, refused, or went uncached halfway
				// (errNotCached), past the point where it could be read.
				in.err = err
				in.until(now.Add(s.opts.Metadata.PartialTTL))
				return true
			}
			in.stored(e, s.blobs)
			if up := in.up; up.metaValidity > 0 {
				in.until(now.Add(up.metaValidity))
			}
			return true
		}
	}
	var body []byte
	var err error
	if f.mem != nil {
		body = f.mem
		f.release()
	} else {
		// counted: the merged answer records the download, not this read.
		// The reader takes over this request's hold of the flight: an
		// uncached flight's fill waits for each holder to read
		// (passthrough.go), and must not wait for a second one.
		r := &flightReader{f: f, bytes: unaccounted, counted: true}
		body, err = io.ReadAll(io.LimitReader(r, max+1))
		r.Close()
		if err == nil && int64(len(body)) > max {
			err = errDocTooLarge
		}
	}
	e, stored := f.result()
	if err != nil {
		in.err = err
		if !errors.Is(err, errDocTooLarge) {
			in.err = &fillError{err}
		}
		in.until(now.Add(s.opts.Metadata.PartialTTL))
		return true
	}
	in.err, in.body, in.size = nil, body, int64(len(body))
	if stored == nil {
		in.digest, in.updated, in.entry = e.SHA256, e.UpdatedAt, e.RelativePath
	} else {
		// The body is whole and verified but could not be stored: merge it
		// all the same, and look again soon.
		sum := sha256.Sum256(body)
		in.digest, in.updated = hex.EncodeToString(sum[:]), now
		in.until(now.Add(s.opts.Metadata.PartialTTL))
	}
	if up := in.up; up.metaValidity > 0 {
		in.until(now.Add(up.metaValidity))
	}
	return true
}

// read returns the input's document, reading its blob once.
func (in *docInput) read(s *engine) ([]byte, error) {
	if in.body != nil || in.err != nil {
		return in.body, in.err
	}
	if in.size > s.opts.Metadata.MaxDocumentBytes {
		return nil, errDocTooLarge
	}
	var err error
	if s.small.fits(in.size) {
		in.body, err = s.small.load(in.digest, in.blob, in.size)
	} else {
		in.body, err = os.ReadFile(in.blob)
	}
	if err != nil && s.blobs.Remote() && errors.Is(err, fs.ErrNotExist) {
		// A cluster node's local tier need not hold the document (evicted,
		// or filled on another node): it is in the bucket.
		in.body, err = s.readRemote(in.digest, in.size)
	}
	return in.body, err
}
