package admin

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/boltstore"
	"registryd/store"
)

// bareServer is an admin Server on an empty store with the defaults, d's
// other fields, and a registry of its own unless d has one.
func bareServer(t *testing.T, d Deps) *Server {
	t.Helper()
	st, err := boltstore.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d.Store = st
	if d.Registerer == nil {
		d.Registerer = prometheus.NewRegistry()
	}
	srv, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Anonymous requests with invented methods and paths create no series of
// their own: methods outside the standard ones are labelled "other", routes
// are patterns, and the admin metrics stay a handful of series however many
// such requests come (they used to take one series per method).
func TestAdminMetricSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := bareServer(t, Deps{Registerer: reg})
	rnd := rand.New(rand.NewPCG(1, 2))
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rnd.IntN(len(letters))]
		}
		return string(b)
	}
	paths := []string{"/api/v4/groups", "/api/v4/projects/1/dependencies", "/-/readiness", "/api/v4/" + word(8)}
	const n = 5000
	for i := range n {
		method := word(3 + rnd.IntN(10))
		if i%10 == 0 {
			method = http.MethodGet
		}
		path := paths[i%len(paths)]
		if i%7 == 0 {
			path = "/" + word(12) // no route at all
		}
		srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series, total := 0, 0.0
	for _, mf := range mfs {
		if mf.GetName() != "registryd_admin_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			series++
			total += m.GetCounter().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() != methodOther && methodLabels[l.GetValue()] == "" {
					t.Errorf("method label %q", l.GetValue())
				}
			}
		}
	}
	if total != n {
		t.Fatalf("%v requests counted, want %d", total, n)
	}
	// Routes (4 patterns, at most) times methods (GET, other) times codes:
	// a few dozen at most, never one per request.
	if series > 40 {
		t.Fatalf("%d series after %d requests with random methods", series, n)
	}
	t.Logf("%d series after %d requests", series, n)
}

// A token a client wrote into the path of an admin request (any case, a
// matrix parameter, percent-encoded) does not reach the error line of a
// request that failed, which carries the path.
func TestAdminErrorLogRedactsTokens(t *testing.T) {
	const secret = "Tok3nValue0123456789abcdef"
	var out bytes.Buffer
	srv := bareServer(t, Deps{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	failing := srv.wrap("test", func(http.ResponseWriter, *http.Request) error { return errors.New("unexpected") })
	for _, p := range []string{"/api/v4/groups;private_token=" + secret, "/api/v4/groups%3FPRIVATE_TOKEN%3D" + secret,
		"/api/v4/projects/1%3Bjob_token=" + secret, "/api/v4/rdpat-" + secret} {
		rec := httptest.NewRecorder()
		failing.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("%s: %d", p, rec.Code)
		}
	}
	if strings.Contains(out.String(), secret) || strings.Count(out.String(), "request failed") != 4 ||
		strings.Count(out.String(), "[redacted]") != 4 {
		t.Fatalf("error lines:\n%s", out.String())
	}
}
