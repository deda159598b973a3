package admin

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	"registryd/store"
)

// A cache entry id is the padded URL-safe base64 of "<upstream id> <relative
// path>", the relative path with its leading "/" (GitLab's form in the spec).
// maxCacheEntryIDLen bounds the encoded form before any decoding work: the
// longest valid id is 19 digits, a space and store.MaxRelativePath bytes.
const maxCacheEntryIDLen = (19 + 1 + store.MaxRelativePath + 2) / 3 * 4

var errBadCacheEntryID = errors.New("invalid cache entry id")

// encodeCacheEntryID is the canonical id of an entry.
func encodeCacheEntryID(upstreamID int64, rel string) string {
	return base64.URLEncoding.EncodeToString([]byte(strconv.FormatInt(upstreamID, 10) + " " + rel))
}

// decodeCacheEntryID parses an id. Like Ruby's urlsafe_decode64, which GitLab
// uses, it also takes the standard alphabet ("+", "/") and missing padding,
// so ids built by other encoders still work. The payload splits on the first
// space only (GitLab splits on every space and so cannot address a path that
// has one). The upstream id must be a positive decimal without sign or
// leading zeros, so each entry has exactly one decoded form.
func decodeCacheEntryID(id string) (int64, string, error) {
	if id == "" || len(id) > maxCacheEntryIDLen {
		return 0, "", errBadCacheEntryID
	}
	body := strings.TrimRight(id, "=")
	if pad := len(id) - len(body); pad > 2 || (pad > 0 && len(id)%4 != 0) {
		return 0, "", errBadCacheEntryID
	}
	// Go's decoder skips CR and LF; an id must not, so check the alphabet here.
	for i := 0; i < len(body); i++ {
		if !isBase64Char(body[i]) {
			return 0, "", errBadCacheEntryID
		}
	}
	body = strings.Map(func(r rune) rune {
		switch r {
		case '+':
			return '-'
		case '/':
			return '_'
		}
		return r
	}, body)
	raw, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil {
		return 0, "", errBadCacheEntryID
	}
	num, rel, ok := strings.Cut(string(raw), " ")
	if !ok || !canonicalID(num) || rel == "" || rel[0] != '/' || len(rel) > store.MaxRelativePath {
		return 0, "", errBadCacheEntryID
	}
	upstreamID, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, "", errBadCacheEntryID
	}
	return upstreamID, rel, nil
}

func isBase64Char(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '+' || c == '/'
}

// canonicalID reports whether s is a positive decimal without sign or
// leading zero (ParseInt would take "+7" and "007").
func canonicalID(s string) bool {
	if s == "" || s[0] == '0' || len(s) > 19 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
