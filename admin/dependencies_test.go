package admin

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"registryd/auth"
)

func depsPath(e *actEnv, vis, query string) string {
	p := fmt.Sprintf("/api/v4/projects/%d/dependencies", e.projects[vis].ID)
	if query != "" {
		p += "?" + query
	}
	return p
}

func fixtureBytes(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "sbom", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// upload PUTs an SBOM fixture as root onto every project.
func (e *actEnv) uploadAll(name string) {
	e.t.Helper()
	for vis := range e.projects {
		e.do(http.MethodPut, depsPath(e, vis, ""), "root", bytes.NewReader(fixtureBytes(e.t, name)),
			"Content-Type", "application/vnd.cyclonedx+json").want(e.t, http.StatusOK)
	}
}

func TestPutDependencies(t *testing.T) {
	e := newActEnv(t, nil)
	r := e.do(http.MethodPut, depsPath(e, "private", ""), "maintainer",
		bytes.NewReader(fixtureBytes(t, "cyclonedx-npm-vulnerable-1.5.json")), "Content-Type", "application/vnd.cyclonedx+json")
	r.want(t, http.StatusOK)
	want := `{"dependencies":3,"vulnerabilities":3,"licenses":1,"package_managers":{"npm":3},` +
		`"skipped_components":0,"spec_version":"1.5","updated_at":"2026-11-21T10:04:05.123Z"}` + "\n"
	if string(r.body) != want {
		t.Fatalf("body\n got %s\nwant %s", r.body, want)
	}

	tests := []struct {
		name   string
		role   string
		vis    string
		ctype  string
		body   string
		status int
		answer string
	}{
		{"anonymous", "", "public", "application/json", "{}", 401, `{"message":"401 Unauthorized"}`},
		{"developer", "developer", "private", "application/json", "{}", 403, `{"message":"403 Forbidden"}`},
		{"guest of a public project", "guest", "public", "application/json", "{}", 403, `{"message":"403 Forbidden"}`},
		{"outsider, private", "outsider", "private", "application/json", "{}", 404, `{"message":"404 Project Not Found"}`},
		{"outsider, public", "outsider", "public", "application/json", "{}", 403, `{"message":"403 Forbidden"}`},
		{"read-only token", "read_api", "public", "application/json", "{}", 403, ""},
		{"wrong media type", "maintainer", "private", "application/xml", "<bom/>", 415,
			`{"message":"415 Unsupported Media Type - send the SBOM as application/vnd.cyclonedx+json, application/spdx+json or application/json"}`},
		{"form body", "maintainer", "private", "application/x-www-form-urlencoded", "a=b", 415, ""},
		{"not an SBOM", "maintainer", "private", "application/json", `{"name":"x"}`, 400,
			`{"message":"400 Bad request - the body is not an SBOM registryd reads: it has neither bomFormat (CycloneDX) nor spdxVersion (SPDX); send CycloneDX 1.4, 1.5, 1.6 or 1.7 JSON, or SPDX 2.2 or 2.3 JSON"}`},
		{"SPDX 3", "maintainer", "private", "application/spdx+json", `{"@context":"https://spdx.org/rdf/3.0.1/spdx-context.jsonld"}`, 400,
			`{"message":"400 Bad request - SPDX 3 (JSON-LD) is not supported; send CycloneDX 1.4, 1.5, 1.6 or 1.7 JSON, or SPDX 2.2 or 2.3 JSON"}`},
		{"old spec", "owner", "private", "application/vnd.cyclonedx+json; version=1.3", `{"bomFormat":"CycloneDX","specVersion":"1.3"}`, 400,
			`{"message":"400 Bad request - CycloneDX specVersion \"1.3\" is not supported; use 1.4, 1.5, 1.6, 1.7"}`},
		{"component without name", "root", "private", "", `{"bomFormat":"CycloneDX","specVersion":"1.5","components":[{"version":"1"}]}`, 400,
			`{"message":{"components[0].name":["is missing"]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodPut, depsPath(e, tt.vis, ""), tt.role, strings.NewReader(tt.body), "Content-Type", tt.ctype)
			r.want(t, tt.status)
			if tt.answer != "" && strings.TrimSpace(string(r.body)) != tt.answer {
				t.Fatalf("body %s, want %s", r.body, tt.answer)
			}
		})
	}
	// Nothing of the refused uploads was stored.
	list := e.do(http.MethodGet, depsPath(e, "private", ""), "root", nil).want(t, 200).list(t)
	if len(list) != 3 || list[0]["name"] != "lodash" {
		t.Fatalf("list after refusals: %v", list)
	}
}

func TestPutDependenciesTooLarge(t *testing.T) {
	e := newActEnv(t, func(o *serverOptions) { o.admin.MaxSBOMBytes = 4 << 10 })
	big := `{"bomFormat":"CycloneDX","specVersion":"1.6","components":[` +
		strings.Repeat(`{"name":"a","version":"1"},`, 500) + `{"name":"b"}]}`
	r := e.do(http.MethodPut, depsPath(e, "private", ""), "root", strings.NewReader(big), "Content-Type", "application/json")
	r.want(t, http.StatusRequestEntityTooLarge)
	// Under the SBOM limit but over the general one is fine for SBOMs only.
	e2 := newActEnv(t, func(o *serverOptions) { o.admin.MaxBodyBytes = 1 << 10 })
	e2.do(http.MethodPut, depsPath(e2, "private", ""), "root", strings.NewReader(big), "Content-Type", "application/json").
		want(t, http.StatusOK)
}

func TestListDependenciesPermissions(t *testing.T) {
	e := newActEnv(t, nil)
	e.uploadAll("cyclonedx-npm-vulnerable-1.5.json")
	tests := []struct {
		role   string
		vis    string
		status int
		vulns  bool
	}{
		{"", "public", 401, false},
		{"root", "private", 200, true},
		{"owner", "private", 200, true},
		{"maintainer", "private", 200, true},
		{"developer", "private", 200, true},
		{"reporter", "private", 200, false},
		{"guest", "private", 403, false},
		{"outsider", "private", 404, false},
		{"guest", "internal", 200, false},
		{"developer", "internal", 200, true},
		{"outsider", "internal", 200, false},
		{"outsider", "public", 200, false},
		{"guest", "public", 200, false},
		{"read_api", "public", 200, false},
		{"reader", "public", 403, false}, // read_user does not read projects
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s on %s", tt.role, tt.vis), func(t *testing.T) {
			r := e.do(http.MethodGet, depsPath(e, tt.vis, ""), tt.role, nil).want(t, tt.status)
			if tt.status != 200 {
				return
			}
			list := r.list(t)
			if len(list) != 3 {
				t.Fatalf("%d dependencies", len(list))
			}
			vulns := list[0]["vulnerabilities"].([]any)
			if got := len(vulns) > 0; got != tt.vulns {
				t.Fatalf("lodash vulnerabilities %v, want shown=%v", vulns, tt.vulns)
			}
			if licenses := list[0]["licenses"].([]any); len(licenses) != 1 {
				t.Fatalf("licenses %v", licenses)
			}
		})
	}
}

func TestListDependenciesShape(t *testing.T) {
	e := newActEnv(t, nil)
	e.uploadAll("cyclonedx-npm-vulnerable-1.5.json")
	r := e.do(http.MethodGet, depsPath(e, "private", "per_page=1"), "developer", nil).want(t, 200)
	rec, _, err := e.st.Dependencies(e.projects["private"].ID, nil, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) int64 { return rec[0].Vulnerabilities[i].ID }
	want := fmt.Sprintf(`[{"name":"lodash","version":"4.17.20","package_manager":"npm","dependency_file_path":"package-lock.json",`+
		`"vulnerabilities":[`+
		`{"name":"CVE-2021-23337","severity":"high","id":%d,"url":"http://registry.example:8081/acme/private/-/security/vulnerabilities/%d"},`+
		`{"name":"CVE-2020-28500","severity":"medium","id":%d,"url":"http://registry.example:8081/acme/private/-/security/vulnerabilities/%d"}],`+
		`"licenses":[{"spdx_identifier":"MIT","name":"MIT","url":"https://spdx.org/licenses/MIT.html"}]}]`+"\n",
		id(0), id(0), id(1), id(1))
	if string(r.body) != want {
		t.Fatalf("body\n got %s\nwant %s", r.body, want)
	}
	for k, v := range map[string]string{"X-Total": "3", "X-Total-Pages": "3", "X-Page": "1", "X-Per-Page": "1", "X-Next-Page": "2", "X-Prev-Page": ""} {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// A reporter sees the same entry with an empty vulnerabilities array.
	r = e.do(http.MethodGet, depsPath(e, "private", "per_page=1"), "reporter", nil).want(t, 200)
	if !bytes.Contains(r.body, []byte(`"vulnerabilities":[],"licenses":[{"spdx_identifier":"MIT"`)) {
		t.Fatalf("reporter's body %s", r.body)
	}
	// Unknown package managers and licenses without a link are null.
	sb := `{"bomFormat":"CycloneDX","specVersion":"1.6","components":[{"name":"libc6","version":"2.36","purl":"pkg:deb/debian/libc6@2.36","licenses":[{"license":{"name":"Custom"}}]}]}`
	e.do(http.MethodPut, depsPath(e, "public", ""), "root", strings.NewReader(sb)).want(t, 200)
	r = e.do(http.MethodGet, depsPath(e, "public", ""), "root", nil).want(t, 200)
	if want := `[{"name":"libc6","version":"2.36","package_manager":null,"dependency_file_path":"","vulnerabilities":[],"licenses":[{"name":"Custom","url":null}]}]` + "\n"; string(r.body) != want {
		t.Fatalf("body\n got %s\nwant %s", r.body, want)
	}
}

func TestListDependenciesFilterAndPages(t *testing.T) {
	e := newActEnv(t, nil)
	e.uploadAll("cdxgen-monorepo-1.6.json") // 3 yarn, 5 pip, 16 go
	names := func(r testResp) []string {
		var out []string
		for _, d := range r.list(t) {
			out = append(out, d["name"].(string)+" "+d["package_manager"].(string))
		}
		return out
	}
	tests := []struct {
		name  string
		query string
		want  []string
		total string
		link  string
	}{
		{"comma list", "package_manager=yarn,pip&per_page=4",
			[]string{"is-number yarn", "left-pad yarn", "to-regex-range yarn", "requests pip"}, "8",
			`<http://registry.example:8081/api/v4/projects/1/dependencies?package_manager=yarn%2Cpip&page=2&per_page=4>; rel="next", ` +
				`<http://registry.example:8081/api/v4/projects/1/dependencies?package_manager=yarn%2Cpip&page=1&per_page=4>; rel="first", ` +
				`<http://registry.example:8081/api/v4/projects/1/dependencies?package_manager=yarn%2Cpip&page=2&per_page=4>; rel="last"`},
		{"array, second page", "package_manager[]=pip&package_manager[]=yarn&per_page=4&page=2",
			[]string{"urllib3 pip", "idna pip", "certifi pip", "charset-normalizer pip"}, "8", ""},
		{"repeated key", "package_manager=go&package_manager=maven&per_page=2&page=8",
			[]string{"google.golang.org/protobuf go", "gopkg.in/yaml.v3 go"}, "16", ""},
		{"none of them", "package_manager=cargo", nil, "0", ""},
		{"default page size", "", nil, "24", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodGet, depsPath(e, "private", tt.query), "root", nil).want(t, 200)
			got := names(r)
			if tt.query == "" {
				if len(got) != 20 {
					t.Fatalf("default page has %d items", len(got))
				}
			} else if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			if r.header.Get("X-Total") != tt.total {
				t.Fatalf("X-Total %q, want %s", r.header.Get("X-Total"), tt.total)
			}
			if tt.link != "" && r.header.Get("Link") != tt.link {
				t.Fatalf("Link\n got %s\nwant %s", r.header.Get("Link"), tt.link)
			}
		})
	}
	bad := []string{"package_manager=maven,gomod", "package_manager=debian", "package_manager[]=npm&package_manager[]=Yarn", "per_page=0", "page=x"}
	for _, q := range bad {
		t.Run("bad "+q, func(t *testing.T) {
			r := e.do(http.MethodGet, depsPath(e, "private", q), "root", nil).want(t, 400)
			if strings.HasPrefix(q, "package_manager") && strings.TrimSpace(string(r.body)) != `{"error":"package_manager does not have a valid value"}` {
				t.Fatalf("body %s", r.body)
			}
		})
	}
}

func TestDependenciesPlanGate(t *testing.T) {
	e := newActEnv(t, func(o *serverOptions) { o.auth.Plan = auth.PlanPremium })
	for _, role := range []string{"", "root", "maintainer"} {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			var body io.Reader
			if method == http.MethodPut {
				body = bytes.NewReader(fixtureBytes(t, "cyclonedx-npm-1.6.json"))
			}
			r := e.do(method, depsPath(e, "public", ""), role, body).want(t, 404)
			if strings.TrimSpace(string(r.body)) != `{"message":"404 Not Found"}` {
				t.Fatalf("%s as %q: %s", method, role, r.body)
			}
		}
	}
}
