package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"registryd/store"
)

// fakeScrub is a Scrubber whose cycle runs until the test says otherwise.
type fakeScrub struct{ running bool }

func (f *fakeScrub) Report() store.ScrubReport {
	if f.running {
		return store.ScrubReport{Running: true, Current: &store.ScrubCycle{Checked: 3}}
	}
	return store.ScrubReport{}
}

func (f *fakeScrub) StartNow() error {
	if f.running {
		return store.ErrScrubRunning
	}
	f.running = true
	return nil
}

func TestScrubEndpoints(t *testing.T) {
	st, srv, _ := newTestServer(t, "root-token", nil)
	_, userTok := newUserWithToken(t, st, "dev", "Dev", "api")
	do := func(method, token string) testResp {
		req := httptest.NewRequest(method, "/api/v4/admin/scrub", nil)
		if token != "" {
			req.Header.Set("PRIVATE-TOKEN", token)
		}
		return serve(srv, req)
	}
	body := func(r testResp) string { return strings.TrimSpace(string(r.body)) }
	// Without a scrub: 503.
	if r := do(http.MethodGet, "root-token").want(t, 503); body(r) != `{"message":"503 Service Unavailable - the scrub is not available"}` {
		t.Fatalf("no scrub: %s", r.body)
	}
	f := &fakeScrub{}
	srv.scrub = f
	do(http.MethodGet, "").want(t, 401)
	do(http.MethodPost, userTok).want(t, 403)
	do(http.MethodGet, userTok).want(t, 403)
	if r := do(http.MethodGet, "root-token").want(t, 200); body(r) != `{"running":false,"current":null,"last":null}` {
		t.Fatalf("idle report: %s", r.body)
	}
	if r := do(http.MethodPost, "root-token").want(t, 202); !strings.Contains(body(r), `"running":true`) || !f.running {
		t.Fatalf("start: %s", r.body)
	}
	if r := do(http.MethodPost, "root-token").want(t, 409); body(r) != `{"message":"409 Conflict - a scrub cycle is running"}` {
		t.Fatalf("start while running: %s", r.body)
	}
	do(http.MethodDelete, "root-token").want(t, 405)
}
