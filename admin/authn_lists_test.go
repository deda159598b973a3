package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"registryd/store"
)

func TestListsNeedAToken(t *testing.T) {
	e := newListEnv(t, nil)
	_, readUser := newUserWithToken(t, e.st, "reader", "Reader", store.ScopeReadUser)
	e.tokens["reader"] = readUser
	for _, path := range []string{"/api/v4/groups", "/api/v4/projects", "/api/v4/personal_access_tokens",
		fmt.Sprintf("/api/v4/groups/%d/members", e.groups["pub"].ID), fmt.Sprintf("/api/v4/projects/%d/members/all", e.projs["site"].ID),
		"/api/v4/version", "/api/v4/metadata", "/api/v4/personal_access_tokens/self"} {
		wantBody(t, e.get(path, ""), 401, `{"message":"401 Unauthorized"}`)
		wantBody(t, e.get(path, "nobody"), 401, `{"message":"401 Unauthorized"}`)
	}
	// read_user reads /version and its own token, not the lists.
	e.get("/api/v4/version", "reader").want(t, http.StatusOK)
	e.get("/api/v4/personal_access_tokens/self", "reader").want(t, http.StatusOK)
	e.get("/api/v4/groups", "reader").want(t, http.StatusForbidden)
}

// A wrong method or an unknown route under /api/v4 answers after the
// credentials are checked: a bad token is always 401.
func TestMethodNotAllowedAfterAuthentication(t *testing.T) {
	e := newListEnv(t, nil)
	tests := []struct {
		name, method, path, role string
		status                   int
		body                     string
	}{
		{"wrong token on a list", "GET", "/api/v4/groups", "nobody", 401, `{"message":"401 Unauthorized"}`},
		{"wrong token, wrong method", "PUT", "/api/v4/groups", "nobody", 401, `{"message":"401 Unauthorized"}`},
		{"no token, wrong method", "DELETE", "/api/v4/projects", "", 401, `{"message":"401 Unauthorized"}`},
		{"wrong method", "PUT", "/api/v4/groups", "alice", 405, `{"error":"405 Not Allowed"}`},
		{"wrong method on a VR route", "PUT", "/api/v4/virtual_registries/packages/maven/registries/1", "nobody", 401, `{"message":"401 Unauthorized"}`},
		{"wrong token, unknown route", "GET", "/api/v4/nothing", "nobody", 401, `{"message":"401 Unauthorized"}`},
		{"no token, unknown route", "GET", "/api/v4/nothing", "", 404, `{"error":"404 Not Found"}`},
		{"unknown route", "GET", "/api/v4/nothing", "alice", 404, `{"error":"404 Not Found"}`},
		// Outside the API nothing is authenticated.
		{"health", "POST", "/-/health", "nobody", 405, `{"error":"405 Not Allowed"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantBody(t, e.send(tc.method, tc.path, tc.role), tc.status, tc.body)
		})
	}
	if allow := e.send("PUT", "/api/v4/groups", "alice").header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow: %q", allow)
	}
}
