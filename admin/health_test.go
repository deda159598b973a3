package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/boltstore"
	"registryd/store"
	"registryd/store/blob"
)

// TestReadinessReportsTheDisk: a full data volume keeps registryd ready
// (hits still work, misses are served uncached) and says so in the body.
func TestReadinessReportsTheDisk(t *testing.T) {
	st, err := boltstore.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	disk := blob.DiskStatus{Filling: true}
	srv, err := New(Deps{Store: st, Registerer: prometheus.NewRegistry(),
		Disk: func() blob.DiskStatus { return disk }})
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/-/readiness", nil))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	if code, body := get(); code != 200 || body != `{"cache":{"filling":true},"status":"ok"}` {
		t.Fatalf("%d %s", code, body)
	}
	disk = blob.DiskStatus{Reason: "data volume full: 12.0 MiB free of 1.0 GiB, 10.2 MiB kept in reserve"}
	if code, body := get(); code != 200 ||
		body != `{"cache":{"filling":false,"reason":"data volume full: 12.0 MiB free of 1.0 GiB, 10.2 MiB kept in reserve"},"status":"ok"}` {
		t.Fatalf("%d %s", code, body)
	}
}
