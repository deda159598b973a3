package admin

import (
	"errors"
	"net/http"
	"strings"

	"registryd/store"
)

func (s *Server) routesCacheEntries() {
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}/cache_entries", s.listCacheEntries)
	// The id is one path segment in its canonical (URL-safe) form, but a
	// client that encodes with the standard alphabet puts "/" in it; the
	// wildcard takes the rest of the path so such an id still decodes.
	s.handle(http.MethodDelete, vrBase+"/cache_entries/{id...}", s.deleteCacheEntry)
	// POST …/cache_entries/*id/invalidate: a ServeMux wildcard that takes the
	// rest of the path must end the pattern, so the suffix is cut off in the
	// handler.
	s.handle(http.MethodPost, vrBase+"/cache_entries/{id...}", s.invalidateCacheEntry)
	s.handle(http.MethodPost, vrBase+"/upstreams/{id}/cache/invalidate", s.invalidateUpstreamCache)
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
	Invalidated       bool      `json:"invalidated,omitempty"`
}

// cacheEntryJSON renders an entry. Blank digests and a missing ETag are
// null, as GitLab renders them (md5 is blank under FIPS there). An
// invalidated entry also carries "invalidated": true (registryd's own field);
// any other entry has exactly GitLab's fields.
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
		Invalidated:       e.Invalidated,
	}
}

// listCacheEntries lists an upstream's live entries, newest first, filtered
// by a case-insensitive substring of the relative path.
func (s *Server) listCacheEntries(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, read)
	if err != nil {
		return err
	}
	pg, search, err := readListParams(r, "search")
	if err != nil {
		return err
	}
	entries, total, err := s.st.ListCacheEntries(u.ID, deref(search), pg.Offset(), pg.PerPage)
	if err != nil {
		return err
	}
	s.writePage(w, r, pg, total, mapViews(entries, cacheEntryJSON))
	return nil
}

// cacheEntryByID runs the checks of an endpoint addressed by a cache entry
// id, in GitLab's order: the gate and authentication, the id (400), the
// entry (404), then access to the group of its upstream.
func (s *Server) cacheEntryByID(r *http.Request, id string, need access) (store.CacheEntry, error) {
	p, err := s.vrAuth(r)
	if err != nil {
		return store.CacheEntry{}, err
	}
	upstreamID, rel, err := decodeCacheEntryID(id)
	if err != nil {
		return store.CacheEntry{}, paramError("id is invalid")
	}
	e, err := s.st.CacheEntry(upstreamID, rel)
	if err != nil {
		return e, entryNotFound(err)
	}
	return e, s.authorizeGroupID(p, e.GroupID, need)
}

// deleteCacheEntry marks one entry for destruction; the collector removes it
// and its blob later. The entry is invisible from the moment this answers.
func (s *Server) deleteCacheEntry(w http.ResponseWriter, r *http.Request) error {
	e, err := s.cacheEntryByID(r, r.PathValue("id"), manage)
	if err != nil {
		return err
	}
	if err := s.st.DeleteCacheEntry(e.UpstreamID, e.RelativePath); err != nil {
		return entryNotFound(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// invalidateSuffix ends the path of a cache entry invalidation.
const invalidateSuffix = "/invalidate"

// invalidateCacheEntry marks one entry stale without removing it (Nexus's
// "invalidate cache"): the next download revalidates it with its upstream,
// and keeps serving it when the upstream is down. It answers the entry.
func (s *Server) invalidateCacheEntry(w http.ResponseWriter, r *http.Request) error {
	id, ok := strings.CutSuffix(r.PathValue("id"), invalidateSuffix)
	if !ok {
		// A POST on the entry itself: the route exists for DELETE only.
		w.Header().Set("Allow", http.MethodDelete)
		return &httpError{status: http.StatusMethodNotAllowed, body: map[string]any{"error": "405 Not Allowed"}}
	}
	e, err := s.cacheEntryByID(r, id, manage)
	if err != nil {
		return err
	}
	if e, err = s.st.InvalidateCacheEntry(e.UpstreamID, e.RelativePath); err != nil {
		return entryNotFound(err)
	}
	writeJSON(w, http.StatusOK, cacheEntryJSON(e))
	return nil
}

// invalidateUpstreamCache marks every entry of an upstream stale without
// removing any, and answers how many entries that is.
func (s *Server) invalidateUpstreamCache(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, manage)
	if err != nil {
		return err
	}
	n, err := s.st.InvalidateUpstreamCache(u.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"invalidated_entries_count": n})
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
