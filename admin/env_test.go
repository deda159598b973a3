package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/advisories"
	"registryd/auth"
	"registryd/internal/boltstore"
	"registryd/internal/testclock"
	"registryd/osv"
	"registryd/store"
)

// serverOptions are the settings of a test server: the admin listener's,
// and those of the auth service and the advisory importer it is wired
// with. Left zero, they are registryd's defaults.
type serverOptions struct {
	admin      Options
	auth       auth.Options
	advisories advisories.Options
}

// newTestServer is an admin Server on a real store in a temp dir, whose root
// user signs in with rootToken. mutate, when not nil, adjusts the options.
func newTestServer(t *testing.T, rootToken string, mutate func(*serverOptions)) (*store.Store, *Server, *testclock.Clock) {
	t.Helper()
	return newTestServerIn(t, t.TempDir(), rootToken, mutate)
}

// newTestServerIn is newTestServer on the database in dir, which may hold
// one already.
func newTestServerIn(t *testing.T, dir, rootToken string, mutate func(*serverOptions)) (*store.Store, *Server, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(time.Date(2026, 11, 21, 10, 4, 5, 123e6, time.UTC))
	st, err := boltstore.Open(dir, store.Options{SecretKey: make([]byte, 32), Now: clock.Now, Matcher: osv.Matcher{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o := serverOptions{admin: Options{ExternalURL: "http://registry.example:8081"}}
	if mutate != nil {
		mutate(&o)
	}
	reg := prometheus.NewRegistry()
	o.advisories.Store, o.advisories.TempDir, o.advisories.Registerer = st, t.TempDir(), reg
	importer, err := advisories.New(o.advisories)
	if err != nil {
		t.Fatal(err)
	}
	o.auth.Now = clock.Now
	srv, err := New(Deps{Options: o.admin, Store: st, Auth: auth.New(st, o.auth), Registerer: reg, Advisories: importer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureRoot(rootToken); err != nil {
		t.Fatal(err)
	}
	return st, srv, clock
}

// newUserWithToken creates a user with one personal access token of scope,
// whose value "rdpat-<username>-token" it returns.
func newUserWithToken(t *testing.T, st *store.Store, username, name, scope string) (store.User, string) {
	t.Helper()
	u, err := st.CreateUser(store.NewUser{Username: username, Name: name, Email: username + "@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	plain := "rdpat-" + username + "-token"
	if _, err := st.CreateToken(store.NewToken{UserID: u.ID, Name: "t", Scopes: []string{scope}, Plain: plain}); err != nil {
		t.Fatal(err)
	}
	return u, plain
}

// testResp is an answer of the admin handler.
type testResp struct {
	status int
	header http.Header
	body   []byte
}

// serve runs req through srv.
func serve(srv *Server, req *http.Request) testResp {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return testResp{status: res.StatusCode, header: res.Header, body: body}
}

func (r testResp) want(t *testing.T, status int) testResp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

func (r testResp) list(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("body is not a JSON array (%v): %s", err, r.body)
	}
	return out
}
