package admin

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// osvZip is an archive of the records of testdata/osv/<dir>, under a
// directory, as the vulndb module's zip has them.
func osvZip(t *testing.T, dir string) []byte {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("..", "testdata", "osv", dir))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("..", "testdata", "osv", dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create("data/osv/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// vulnsByName lists, per dependency name, "id-free" vulnerability views:
// "name (severity)".
func vulnsByName(t *testing.T, list []map[string]any) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, d := range list {
		var vs []string
		for _, v := range d["vulnerabilities"].([]any) {
			m := v.(map[string]any)
			if !strings.HasPrefix(m["url"].(string), "http://registry.example:8081/acme/private/-/security/vulnerabilities/") {
				t.Errorf("vulnerability url %v", m["url"])
			}
			vs = append(vs, fmt.Sprintf("%s (%s)", m["name"], m["severity"]))
		}
		if len(vs) > 0 {
			out[d["name"].(string)] = vs
		}
	}
	return out
}

// A project whose SBOM (a real cdxgen 1.7 scan of a Go app) carried no
// vulnerability lists those of the Go vulnerability database once it is
// imported, without a new upload; a later import that withdraws one takes
// it off.
func TestAdvisoryImportShowsVulnerabilities(t *testing.T) {
	e := newActEnv(t, nil)
	e.do(http.MethodPut, depsPath(e, "private", ""), "maintainer", bytes.NewReader(fixtureBytes(t, "cdxgen-goapp-1.7.json")),
		"Content-Type", "application/vnd.cyclonedx+json").want(t, http.StatusOK)
	list := e.do(http.MethodGet, depsPath(e, "private", "per_page=100"), "developer", nil).want(t, 200).list(t)
	if got := vulnsByName(t, list); len(got) != 0 {
		t.Fatalf("vulnerabilities before any advisory: %v", got)
	}

	r := e.do(http.MethodPost, "/api/v4/admin/advisories?source=go-vulndb&full=true", "root", bytes.NewReader(osvZip(t, "go")),
		"Content-Type", "application/zip").want(t, http.StatusOK)
	var res map[string]any
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if res["added"] != 7.0 || res["skipped"] != 1.0 || res["projects"] != 1.0 || res["dependencies"] != 2.0 || res["complete"] != true ||
		res["files"] != 8.0 {
		t.Fatalf("import answer %s", r.body)
	}
	want := map[string][]string{
		"github.com/gin-gonic/gin": {
			"Arbitrary log line injection in github.com/gin-gonic/gin (unknown)",
			"Inconsistent interpretation of HTTP Requests in github.com/gin-gonic/gin (unknown)",
			"Improper handling of filenames in Content-Disposition HTTP header in github.com/gin-gonic/gin (unknown)",
		},
		"golang.org/x/text": {
			"Out-of-bounds read in golang.org/x/text/language (unknown)",
			"Denial of service via crafted Accept-Language header in golang.org/x/text/language (unknown)",
		},
	}
	list = e.do(http.MethodGet, depsPath(e, "private", "per_page=100"), "developer", nil).want(t, 200).list(t)
	if got := vulnsByName(t, list); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("vulnerabilities\n got %v\nwant %v", got, want)
	}
	// Those who may not read the security dashboard see none.
	for _, d := range e.do(http.MethodGet, depsPath(e, "private", "per_page=100"), "reporter", nil).want(t, 200).list(t) {
		if len(d["vulnerabilities"].([]any)) != 0 {
			t.Fatalf("a reporter sees %v", d)
		}
	}

	// A partial import (NDJSON) withdraws GO-2021-0052: gin loses it.
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "osv", "go", "GO-2021-0052.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	json.Unmarshal(raw, &rec)
	rec["withdrawn"] = "2026-11-21T00:00:00Z"
	line, _ := json.Marshal(rec)
	r = e.do(http.MethodPost, "/api/v4/admin/advisories?source=go-vulndb", "root", bytes.NewReader(append(line, '\n')),
		"Content-Type", "application/x-ndjson").want(t, http.StatusOK)
	if !strings.Contains(string(r.body), `"removed":1`) {
		t.Fatalf("withdrawing: %s", r.body)
	}
	list = e.do(http.MethodGet, depsPath(e, "private", "per_page=100"), "maintainer", nil).want(t, 200).list(t)
	if got := vulnsByName(t, list)["github.com/gin-gonic/gin"]; len(got) != 2 || slices.Contains(got, want["github.com/gin-gonic/gin"][1]) {
		t.Fatalf("gin after the withdrawal: %v", got)
	}

	status := e.do(http.MethodGet, "/api/v4/admin/advisories", "root", nil).want(t, http.StatusOK)
	if !strings.Contains(string(status.body), `"advisories":6`) || !strings.Contains(string(status.body), `"source":"go-vulndb"`) {
		t.Fatalf("status %s", status.body)
	}
}

func TestAdvisoryImportRefusals(t *testing.T) {
	e := newActEnv(t, func(o *serverOptions) { o.advisories.MaxBytes = 1 << 20 })
	tests := []struct {
		name, role, path, body string
		status                 int
		answer                 string
	}{
		{"anonymous", "", "/api/v4/admin/advisories", "{}", 401, `{"message":"401 Unauthorized"}`},
		{"not an admin", "owner", "/api/v4/admin/advisories", "{}", 403, `{"message":"403 Forbidden"}`},
		{"status, not an admin", "maintainer", "/api/v4/admin/advisories", "", 403, `{"message":"403 Forbidden"}`},
		{"bad full", "root", "/api/v4/admin/advisories?full=maybe", "{}", 400, `{"message":"400 Bad request - full is invalid"}`},
		{"long source", "root", "/api/v4/admin/advisories?source=" + strings.Repeat("s", 256), "{}", 400,
			`{"message":"400 Bad request - source is longer than 255 bytes"}`},
		{"not JSON", "root", "/api/v4/admin/advisories", "PK\x03\x04 but no zip", 400, ""},
		{"too large", "root", "/api/v4/admin/advisories", strings.Repeat(" ", 1<<20+1), 413,
			`{"message":"413 Request Entity Too Large - the advisory database is larger than 1MiB (advisories.max_bytes)"}`},
		{"refresh without sources", "root", "/api/v4/admin/advisories/refresh", "", 400,
			`{"message":"400 Bad request - no advisory source is configured (advisories.sources)"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := http.MethodPost
			if tt.body == "" && !strings.HasSuffix(tt.path, "/refresh") {
				method = http.MethodGet
			}
			r := e.do(method, tt.path, tt.role, strings.NewReader(tt.body), "Content-Type", "application/json")
			r.want(t, tt.status)
			if tt.answer != "" && strings.TrimSpace(string(r.body)) != tt.answer {
				t.Fatalf("body %s, want %s", r.body, tt.answer)
			}
		})
	}
}
