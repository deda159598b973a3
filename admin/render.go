package admin

import (
	"strconv"
	"time"

	"registryd/store"
)

// Timestamps are ISO 8601 UTC with milliseconds, as GitLab writes them.
const timeFormat = "2006-01-02T15:04:05.000Z"

// jsonTime renders a time with milliseconds in UTC; the zero time is null.
type jsonTime time.Time

func (t jsonTime) MarshalJSON() ([]byte, error) {
	tt := time.Time(t)
	if tt.IsZero() {
		return []byte("null"), nil
	}
	return []byte(strconv.Quote(tt.UTC().Format(timeFormat))), nil
}

func optTime(t *time.Time) *jsonTime {
	if t == nil {
		return nil
	}
	j := jsonTime(*t)
	return &j
}

// jsonDate renders a date (expires_at) as YYYY-MM-DD.
type jsonDate time.Time

func (d jsonDate) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Time(d).UTC().Format("2006-01-02"))), nil
}

func optDate(t *time.Time) *jsonDate {
	if t == nil {
		return nil
	}
	d := jsonDate(*t)
	return &d
}

// mapViews renders each item with view. An empty list is [] in JSON, never
// null.
func mapViews[T, V any](items []T, view func(T) V) []V {
	out := make([]V, 0, len(items))
	for _, it := range items {
		out = append(out, view(it))
	}
	return out
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// userSummary is GitLab's basic user shape.
type userSummary struct {
	ID        int64   `json:"id"`
	Username  string  `json:"username"`
	Name      string  `json:"name"`
	State     string  `json:"state"`
	AvatarURL *string `json:"avatar_url"`
	WebURL    string  `json:"web_url"`
}

func (s *Server) userSummary(u store.User) userSummary {
	return userSummary{ID: u.ID, Username: u.Username, Name: u.Name, State: u.State, WebURL: s.webURL(u.Username)}
}

// webURL is a link on the external URL.
func (s *Server) webURL(path string) string {
	base := s.opts.ExternalURL
	for len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	return base + "/" + path
}

// sizeText writes a limit as the configuration does ("4KiB", "64MiB",
// "1GiB"; bytes when no unit divides it), so that a 413 names the limit in
// the operator's words.
func sizeText(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
