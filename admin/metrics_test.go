package admin

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/config"
	"registryd/store"
)

// Anonymous requests with invented methods and paths create no series of
// their own: methods outside the standard ones are labelled "other", routes
// are patterns, and the admin metrics stay a handful of series however many
// such requests come (they used to take one series per method).
func TestAdminMetricSeriesBounded(t *testing.T) {
	st, err := store.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	srv, err := New(Deps{Config: config.Default(), Store: st, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
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
