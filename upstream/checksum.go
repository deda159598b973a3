package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
)

// MaxChecksumFileSize is the largest checksum file GetChecksum reads.
const MaxChecksumFileSize = 1 << 10

// ParseHexDigest returns v lower-cased when, after trimming spaces, it is
// exactly n hex digits; otherwise "". Use it for checksum headers, e.g.
// ParseHexDigest(h.Get("X-Checksum-Sha1"), 40).
func ParseHexDigest(v string, n int) string {
	return hexDigest(strings.TrimSpace(v), n)
}

// hexDigest is ParseHexDigest without the trimming.
func hexDigest(v string, n int) string {
	if len(v) != n {
		return ""
	}
	for i := 0; i < n; i++ {
		c := v[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return ""
		}
	}
	return strings.ToLower(v)
}

// nexusETagSHA1 returns the SHA-1 of a Nexus ETag, "{SHA1{<40 hex>}}" in
// quotes, optionally weak (W/), or "".
func nexusETagSHA1(etag string) string {
	e := strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	if len(e) < 2 || e[0] != '"' || e[len(e)-1] != '"' {
		return ""
	}
	e = e[1 : len(e)-1]
	if !strings.HasPrefix(e, "{SHA1{") || !strings.HasSuffix(e, "}}") {
		return ""
	}
	return hexDigest(e[len("{SHA1{"):len(e)-len("}}")], 40)
}

// offeredChecksums reads the checksums an answer's headers offer. conflict
// is true when X-Checksum-Sha1 and a Nexus ETag both name a SHA-1 and they
// differ; sha1 is then the header's.
func offeredChecksums(h http.Header) (sha1, md5, sha256 string, conflict bool) {
	sha1 = ParseHexDigest(h.Get("X-Checksum-Sha1"), 40)
	if tag := nexusETagSHA1(h.Get("ETag")); tag != "" {
		if sha1 == "" {
			sha1 = tag
		} else if sha1 != tag {
			conflict = true
		}
	}
	md5 = ParseHexDigest(h.Get("X-Checksum-Md5"), 32)
	sha256 = ParseHexDigest(h.Get("X-Checksum-Sha256"), 64)
	return sha1, md5, sha256, conflict
}

// GetChecksum fetches relPath + ".sha1" and returns the SHA-1 it names, 40
// lower-case hex digits; it is what the require checksum policy checks a
// file against. The whole request is bounded by CheckTimeout, and the file
// by MaxChecksumFileSize.
//
// Accepted formats are those Maven's resolver reads: the first non-blank
// line, trimmed, is either "<hex>" followed by nothing or by a space and
// anything ("<hex>  <file>" of sha1sum, "<hex> *<file>" in binary mode), or
// ends in "= <hex>" (openssl's "SHA1(<file>)= <hex>", BSD's "SHA1 (<file>)
// = <hex>"). The digest must be 40 hex digits, in either case.
//
// Errors are as for Get (404 and 410 are a *StatusError matching
// ErrNotFound), plus *AnswerError "checksum file is longer than 1 KiB" and
// "checksum file is malformed".
func (c *Client) GetChecksum(ctx context.Context, ep Endpoint, relPath string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.checkTimeout)
	defer cancel()
	resp, err := c.get(ctx, ep, relPath+".sha1", "", 0)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxChecksumFileSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxChecksumFileSize {
		return "", &AnswerError{Op: http.MethodGet, URL: resp.target, Reason: "checksum file is longer than 1 KiB"}
	}
	sum := parseChecksumFile(b)
	if sum == "" {
		return "", &AnswerError{Op: http.MethodGet, URL: resp.target, Reason: "checksum file is malformed"}
	}
	return sum, nil
}

// parseChecksumFile returns the SHA-1 of a .sha1 file, lower-cased, or "".
// It follows maven-resolver's ChecksumUtils.read: first non-blank line;
// "... = <hex>" takes what follows the last space, anything else what
// precedes the first space.
func parseChecksumFile(b []byte) string {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 BOM
	var line string
	for l := range strings.SplitSeq(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	if i := strings.LastIndexByte(line, ' '); i > 1 && line[i-1] == '=' {
		if sum := hexDigest(line[i+1:], 40); sum != "" {
			return sum
		}
	}
	if i := strings.IndexAny(line, " \t"); i >= 0 {
		line = line[:i]
	}
	return hexDigest(line, 40)
}
