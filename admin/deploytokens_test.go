package admin

import (
	"fmt"
	"net/http"
	"testing"
)

// TestDeployTokenExpiresAtIsInstant: a deploy token's expires_at is a
// date-time, as GitLab's: its zone counts, and a bare date is its midnight
// UTC (a date parser would keep the written day and drop the time).
func TestDeployTokenExpiresAtIsInstant(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	path := fmt.Sprintf("/api/v4/groups/%d/deploy_tokens", e.group.ID)
	for body, want := range map[string]string{
		`{"name":"a","scopes":["read_virtual_registry"],"expires_at":"2030-01-01T01:00:00+09:00"}`: "2029-12-31T16:00:00.000Z",
		`{"name":"b","scopes":["read_virtual_registry"],"expires_at":"2030-01-01T01:00:00-05:00"}`: "2030-01-01T06:00:00.000Z",
		`{"name":"c","scopes":["read_virtual_registry"],"expires_at":"2030-01-01"}`:                "2030-01-01T00:00:00.000Z",
	} {
		m := object(t, e.send(http.MethodPost, path, "root", body).want(t, http.StatusCreated))
		if m["expires_at"] != want {
			t.Errorf("%s: expires_at %v, want %s", body, m["expires_at"], want)
		}
	}
	e.send(http.MethodPost, path, "root", `{"name":"d","scopes":["read_virtual_registry"],"expires_at":"next week"}`).
		want(t, http.StatusBadRequest)
}
