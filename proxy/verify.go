package proxy

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"

	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// An upstream answer is untrusted input. The upstream client refuses what
// it can judge alone (a status other than 200/203, an encoding it does not
// decode, a body longer than its Content-Length: upstream.ErrBadAnswer);
// the fill refuses the rest before anything is stored or answered as the
// file: a media type or a first few bytes that say "web page" for a file
// that is not one (maven.RefusedType, maven.LooksLikeHTML), and bytes whose
// digests contradict the checksums the upstream offered, or, under the
// require policy, an upstream that offers none. A refusal is an upstream
// failure like a 5xx: the next upstream is asked on a miss, the stored copy
// is served on a revalidation.

// refusedError is an answer the fill refused. reason is fixed text (and
// media types parsed to lower-case tokens), safe to show a client.
type refusedError struct {
	label  string // the refusals metric's reason label
	reason string
}

func (e *refusedError) Error() string { return "upstream answer refused: " + e.reason }

// Labels of registryd_upstream_refusals_total.
const (
	refusedAnswer      = "answer"       // refused by the upstream client (status, encoding, length)
	refusedBlocked     = "blocked"      // a redirect (or the upstream's name) to an address registryd does not connect to
	refusedType        = "content_type" // a text or HTML media type for a file that is not text
	refusedHTML        = "html_body"    // a body that starts like an HTML page
	refusedEmpty       = "empty_body"   // no bytes at all for a binary file
	refusedMismatch    = "checksum_mismatch"
	refusedNoChecksum  = "checksum_missing" // require policy, nothing offered
	refusedBadChecksum = "checksum_unusable"
)

// refuse counts, logs and remembers (pathMemory) a refused answer and returns err
// unchanged, for the caller to fail the flight with.
func (s *engine) refuse(f *flight, err error) error {
	label := refusedAnswer
	var re *refusedError
	switch {
	case errors.As(err, &re):
		label = re.label
	case errors.Is(err, upstream.ErrBlocked):
		label = refusedBlocked
	}
	s.met.refusals.WithLabelValues(f.up.label, label).Inc()
	s.log.Warn("upstream answer refused; nothing cached", "upstream", f.up.id, "path", f.relSlash,
		"reason", failureReason(err))
	s.marks.rememberRefused(s.st, f.up.id, f.key.rel, err, s.now())
	return err
}

// refusal reports whether err is a refused answer, of the client or the fill.
func refusal(err error) bool {
	var re *refusedError
	return errors.As(err, &re) || errors.Is(err, upstream.ErrBadAnswer)
}

// expected are the digests an answer must have: lower-case hex, "" for
// each one not offered.
type expected struct {
	sha1, md5, sha256 string
}

func (x expected) any() bool { return x.sha1 != "" || x.md5 != "" || x.sha256 != "" }

// check compares the digests of the bytes received with x.
func (x expected) check(d blob.Digests) error {
	if (x.sha1 != "" && x.sha1 != d.SHA1) || (x.md5 != "" && x.md5 != d.MD5) || (x.sha256 != "" && x.sha256 != d.SHA256) {
		return &refusedError{label: refusedMismatch, reason: "the body does not match the checksum the upstream sent"}
	}
	return nil
}

// admit judges an answer's headers: its media type against the file, and
// the checksums it must match under the upstream's policy (fetching the
// .sha1 under require when the answer offers none).
func (s *engine) admit(ctx context.Context, f *flight, resp *upstream.Response) (expected, error) {
	if reason := maven.RefusedType(f.key.rel, resp.ContentType); reason != "" {
		return expected{}, &refusedError{label: refusedType, reason: reason}
	}
	if f.up.policy == store.ChecksumOff {
		return expected{}, nil
	}
	x := expected{sha1: resp.SHA1, md5: resp.MD5, sha256: resp.SHA256}
	if x.any() || f.up.policy != store.ChecksumRequire {
		return x, nil
	}
	sum, err := s.up.GetChecksum(ctx, f.up.ep, f.key.rel)
	switch {
	case errors.Is(err, upstream.ErrNotFound):
		return x, &refusedError{label: refusedNoChecksum, reason: "the upstream offers no checksum and the checksum policy requires one"}
	case errors.Is(err, upstream.ErrBadAnswer):
		return x, &refusedError{label: refusedBadChecksum, reason: "the upstream's checksum file is unusable"}
	case err != nil:
		// Unavailable while fetching the checksum: an upstream failure
		// like any other, not a refusal of the file.
		return x, err
	}
	x.sha1 = sum
	return x, nil
}

// sniff refuses a body whose first bytes are a web page. head is what was
// read of body already; when it is shorter than maven.SniffLen, more is
// read. It returns a reader that yields the whole body again. A read error
// is returned as it is.
func (s *engine) sniff(f *flight, head []byte, body io.Reader) (io.Reader, error) {
	if len(head) < maven.SniffLen {
		buf := make([]byte, maven.SniffLen)
		n := copy(buf, head)
		m, _, err := readFull(body, buf[n:])
		if err != nil {
			return nil, err
		}
		head = buf[:n+m]
	}
	if maven.LooksLikeHTML(f.key.rel, head[:min(len(head), maven.SniffLen)]) {
		return nil, &refusedError{label: refusedHTML, reason: "answered a web page for a file that is not HTML"}
	}
	return io.MultiReader(bytes.NewReader(head), body), nil
}

// smallDigests are the digests of a body read whole: MD5 and SHA-1 for the
// response headers, SHA-256 only when the upstream offered one to check.
func smallDigests(body []byte, withSHA256 bool) blob.Digests {
	m, s1 := md5.Sum(body), sha1.Sum(body)
	d := blob.Digests{Size: int64(len(body)), MD5: hex.EncodeToString(m[:]), SHA1: hex.EncodeToString(s1[:])}
	if withSHA256 {
		s2 := sha256.Sum256(body)
		d.SHA256 = hex.EncodeToString(s2[:])
	}
	return d
}
