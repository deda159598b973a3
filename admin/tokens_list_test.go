package admin

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"registryd/auth"
	"registryd/store"
)

func TestListTokens(t *testing.T) {
	e := newListEnv(t, nil)
	mk := func(user, name string, expires *time.Time) store.Token {
		t.Helper()
		tok, err := e.st.CreateToken(store.NewToken{UserID: e.users[user].ID, Name: name, Scopes: []string{store.ScopeReadAPI},
			ExpiresAt: expires, Plain: "rdpat-" + user + "-" + name})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	soon := e.clock.Now().Add(48 * time.Hour).Truncate(24 * time.Hour)
	laptop := mk("alice", "laptop", &soon)
	ci := mk("alice", "CI runner", nil)
	bot := mk("alice", "deploy bot", nil)
	if err := e.st.RevokeToken(bot.ID); err != nil {
		t.Fatal(err)
	}
	mk("bob", "bob laptop", nil)
	e.clock.Advance(72 * time.Hour) // laptop has expired

	tests := []struct {
		name, role, query string
		want              []string
	}{
		// The caller's own tokens, by id (newUserWithToken made "t").
		{"own", "alice", "", []string{"t", "laptop", "CI runner", "deploy bot"}},
		{"own by user_id", "alice", fmt.Sprintf("?user_id=%d", e.users["alice"].ID), []string{"t", "laptop", "CI runner", "deploy bot"}},
		{"admin sees all", "root", "?per_page=100", []string{"initial root token", "t", "t", "t", "t", "t", "laptop", "CI runner", "deploy bot", "bob laptop"}},
		{"admin one user", "root", fmt.Sprintf("?user_id=%d", e.users["bob"].ID), []string{"t", "bob laptop"}},
		{"admin unknown user", "root", "?user_id=999", nil},
		{"admin user 0", "root", "?user_id=0", nil},
		{"active", "alice", "?state=active", []string{"t", "CI runner"}},
		{"inactive", "alice", "?state=inactive", []string{"laptop", "deploy bot"}},
		{"revoked", "alice", "?revoked=true", []string{"deploy bot"}},
		{"not revoked", "alice", "?revoked=false", []string{"t", "laptop", "CI runner"}},
		{"search", "alice", "?search=LAP", []string{"laptop"}},
		{"search across users", "root", "?search=laptop", []string{"laptop", "bob laptop"}},
		{"search short is exact", "alice", "?search=T", []string{"t"}},
		{"search and state", "root", "?search=laptop&state=active", []string{"bob laptop"}},
		{"page", "alice", "?per_page=3&page=2", []string{"deploy bot"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantNames(t, e.get("/api/v4/personal_access_tokens"+tc.query, tc.role), "name", tc.want...)
		})
	}

	// The entity: no token value, active and revoked as they are.
	list := e.get("/api/v4/personal_access_tokens?search=laptop", "alice").want(t, 200).list(t)
	if len(list) != 1 {
		t.Fatalf("list %v", list)
	}
	l := list[0]
	if _, has := l["token"]; has || l["active"] != false || l["revoked"] != false || l["expires_at"] != soon.Format("2006-01-02") ||
		l["user_id"] != float64(e.users["alice"].ID) || l["last_used_at"] != nil || fmt.Sprint(l["scopes"]) != "[read_api]" {
		t.Fatalf("token %v", l)
	}

	for _, tc := range []struct {
		name, role, query string
		status            int
		body              string
	}{
		// GitLab: a non-admin naming another user is unauthorized.
		{"another user's", "alice", fmt.Sprintf("?user_id=%d", e.users["bob"].ID), 401, `{"message":"401 Unauthorized"}`},
		{"bad state", "alice", "?state=expired", 400, `{"error":"state does not have a valid value"}`},
		{"bad revoked", "alice", "?revoked=perhaps", 400, `{"error":"revoked is invalid"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantBody(t, e.get("/api/v4/personal_access_tokens"+tc.query, tc.role), tc.status, tc.body)
		})
	}

	// One token: admins any, users their own, another's is 404 as for DELETE.
	got := object(t, e.get(fmt.Sprintf("/api/v4/personal_access_tokens/%d", ci.ID), "alice").want(t, 200))
	if got["name"] != "CI runner" || got["active"] != true {
		t.Fatalf("token %v", got)
	}
	e.get(fmt.Sprintf("/api/v4/personal_access_tokens/%d", laptop.ID), "root").want(t, 200)
	wantBody(t, e.get(fmt.Sprintf("/api/v4/personal_access_tokens/%d", ci.ID), "bob"), 404, `{"message":"404 Not found"}`)
	wantBody(t, e.get("/api/v4/personal_access_tokens/999", "root"), 404, `{"message":"404 Not found"}`)
	wantBody(t, e.get("/api/v4/personal_access_tokens/x", "root"), 400, `{"error":"id is invalid"}`)
}

func TestSelfToken(t *testing.T) {
	e := newListEnv(t, nil)
	// Any scope reads and revokes itself.
	_, plain := newUserWithToken(t, e.st, "robot", "Robot", store.ScopeReadVirtualRegistry)
	e.tokens["robot"] = plain
	self := object(t, e.get("/api/v4/personal_access_tokens/self", "robot").want(t, 200))
	if self["name"] != "t" || self["active"] != true || fmt.Sprint(self["scopes"]) != "[read_virtual_registry]" {
		t.Fatalf("self %v", self)
	}
	if _, has := self["token"]; has {
		t.Fatalf("self shows the token: %v", self)
	}
	// Not the caller's other tokens, nor anything else.
	e.get("/api/v4/personal_access_tokens", "robot").want(t, http.StatusForbidden)
	root := object(t, e.get("/api/v4/personal_access_tokens/self", "root").want(t, 200))
	if root["name"] == self["name"] && root["id"] == self["id"] {
		t.Fatalf("root's self %v", root)
	}

	wantBody(t, e.send(http.MethodDelete, "/api/v4/personal_access_tokens/self", "robot"), 204, "")
	wantBody(t, e.get("/api/v4/personal_access_tokens/self", "robot"), 401, `{"message":"401 Unauthorized"}`)
	got := object(t, e.get(fmt.Sprintf("/api/v4/personal_access_tokens/%d", int64(self["id"].(float64))), "root").want(t, 200))
	if got["revoked"] != true || got["active"] != false {
		t.Fatalf("revoked self %v", got)
	}
}

func TestVersionAndMetadata(t *testing.T) {
	for _, tc := range []struct {
		plan       auth.Plan
		enterprise bool
	}{{auth.PlanUltimate, true}, {auth.PlanPremium, true}, {auth.PlanFree, false}} {
		t.Run(string(tc.plan), func(t *testing.T) {
			e := newListEnv(t, func(o *serverOptions) { o.auth.Plan = tc.plan })
			e.srv.version = "v1.4.0-3-gabcdef1"
			_, reader := newUserWithToken(t, e.st, "reader", "Reader", store.ScopeReadUser)
			e.tokens["reader"] = reader
			for _, path := range []string{"/api/v4/version", "/api/v4/metadata"} {
				m := object(t, e.get(path, "reader").want(t, 200))
				kas, _ := m["kas"].(map[string]any)
				rev, _ := m["revision"].(string)
				if m["version"] != "v1.4.0-3-gabcdef1" || m["enterprise"] != tc.enterprise || (rev != "unknown" && len(rev) != 11) ||
					kas == nil || kas["enabled"] != false || kas["externalUrl"] != nil || kas["version"] != nil {
					t.Fatalf("%s: %v", path, m)
				}
			}
		})
	}
	// Without a version given, it says so.
	e := newListEnv(t, nil)
	if m := object(t, e.get("/api/v4/version", "root").want(t, 200)); m["version"] != "unknown" {
		t.Fatalf("no version given: %v", m)
	}
}

// TestVersionRevision: GET /version shows the revision registryd was given
// (the Makefile's, from git) abbreviated to 11 hex digits; one that is not
// a commit id falls back to the binary's own record, else "unknown".
func TestVersionRevision(t *testing.T) {
	for given, want := range map[string]string{
		"3f9c2a1b7d0": "3f9c2a1b7d0",
		"3f9c2a1b7d04e5f60718293a4b5c6d7e8f901234": "3f9c2a1b7d0",
	} {
		if got := revisionOf(given); got != want {
			t.Errorf("revisionOf(%q) = %q, want %q", given, got, want)
		}
	}
	// Not a commit id: whatever the test binary recorded, or unknown.
	for _, given := range []string{"", "abc", "not-a-commit-id", "3F9C2A1B7D0"} {
		if got := revisionOf(given); got != revisionOf("") || (got != "unknown" && len(got) != 11) {
			t.Errorf("revisionOf(%q) = %q", given, got)
		}
	}
	e := newListEnv(t, func(o *serverOptions) {})
	e.srv.revision = revisionOf("0123456789abcdef")
	if m := object(t, e.get("/api/v4/version", "root").want(t, 200)); m["revision"] != "0123456789a" {
		t.Fatalf("revision: %v", m)
	}
}
