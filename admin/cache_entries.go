package admin

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"registryd/store"
)

func (s *Server) routesCacheEntries() {
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}/cache_entries", s.listCacheEntries)
	// The id is one path segment in its canonical (URL-safe) form, but a
	// client that encodes with the standard alphabet puts "/" in it; the
	// wildcard takes the rest of the path so such an id still decodes.
	s.handle(http.MethodDelete, vrBase+"/cache_entries/{id...}", s.deleteCacheEntry)
}

// cacheEntryView is the spec's Cache entry, in GitLab's field order.
type cacheEntryView struct {
	ID                string    `json:"id"`
	GroupID           int64     `json:"group_id"`
	UpstreamID        int64     `json:"upstream_id"`
	UpstreamCheckedAt jsonTime  `json:"upstream_checked_at"`
	FileMD5           *string   `json:"file_md5"`
	FileSHA1          *string   `json:"file_sha1"`
	Size              int64     `json:"size"`
	RelativePath      string    `json:"relative_path"`
	ContentType       string    `json:"content_type"`
	UpstreamETag      *string   `json:"upstream_etag"`
	CreatedAt         jsonTime  `json:"created_at"`
	UpdatedAt         jsonTime  `json:"updated_at"`
	DownloadsCount    int64     `json:"downloads_count"`
	DownloadedAt      *jsonTime `json:"downloaded_at"`
}

// cacheEntryJSON renders an entry. Blank digests and a missing ETag are
// null, as GitLab renders them (md5 is blank under FIPS there).
func cacheEntryJSON(e store.CacheEntry) cacheEntryView {
	return cacheEntryView{
		ID:                encodeCacheEntryID(e.UpstreamID, e.RelativePath),
		GroupID:           e.GroupID,
		UpstreamID:        e.UpstreamID,
		UpstreamCheckedAt: jsonTime(e.CheckedAt),
		FileMD5:           optString(e.MD5),
		FileSHA1:          optString(e.SHA1),
		Size:              e.Size,
		RelativePath:      e.RelativePath,
		ContentType:       e.ContentType,
		UpstreamETag:      optString(e.ETag),
		CreatedAt:         jsonTime(e.CreatedAt),
		UpdatedAt:         jsonTime(e.UpdatedAt),
		DownloadsCount:    e.DownloadsCount,
		DownloadedAt:      optTime(e.DownloadedAt),
	}
}

// listCacheEntries lists an upstream's live entries, newest first, filtered
// by a case-insensitive substring of the relative path.
func (s *Server) listCacheEntries(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, read)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	pg := in.page()
	search := in.str("search")
	if err := in.err(); err != nil {
		return err
	}
	needle := ""
	if search != nil {
		needle = *search
	}
	entries, total, err := s.st.ListCacheEntries(u.ID, needle, pg.Offset(), pg.PerPage)
	if err != nil {
		return err
	}
	out := make([]cacheEntryView, 0, len(entries))
	for _, e := range entries {
		out = append(out, cacheEntryJSON(e))
	}
	s.setPageHeaders(w, r, pg, total)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteCacheEntry marks one entry for destruction; the collector removes it
// and its blob later. The entry is invisible from the moment this answers.
func (s *Server) deleteCacheEntry(w http.ResponseWriter, r *http.Request) error {
	p, err := s.vrAuth(r)
	if err != nil {
		return err
	}
	upstreamID, rel, err := decodeCacheEntryID(r.PathValue("id"))
	if err != nil {
		return paramError("id is invalid")
	}
	e, err := s.st.CacheEntry(upstreamID, rel)
	if err != nil {
		return entryNotFound(err)
	}
	if err := s.authorizeGroupID(p, e.GroupID, manage); err != nil {
		return err
	}
	if err := s.st.DeleteCacheEntry(e.UpstreamID, e.RelativePath); err != nil {
		return entryNotFound(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// entryNotFound turns any not-found of an entry lookup (the entry or its
// upstream) into GitLab's plain "404 Not found": the caller asked for an
// entry, not an upstream.
func entryNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return errRecordMissing
	}
	return err
}

// --- cache entry ids ---

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
