package admin

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store"
)

// ceEnv is an admin Server on a real store in a temp dir, with a private
// top-level group "acme" holding one registry and one upstream, and one
// user per access level.
type ceEnv struct {
	t        *testing.T
	st       *store.Store
	srv      *Server
	clock    *testclock.Clock
	group    store.Group
	registry store.Registry
	upstream store.Upstream
	tokens   map[string]string // role -> token value
}

const ceRootToken = "rdpat-cache-entries-root-token"

func newCacheEntryEnv(t *testing.T, mutate func(*serverOptions)) *ceEnv {
	t.Helper()
	st, srv, clock := newTestServer(t, ceRootToken, mutate)
	e := &ceEnv{t: t, st: st, srv: srv, clock: clock, tokens: map[string]string{"root": ceRootToken}}
	var err error
	if e.group, err = st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme", Visibility: store.Private}); err != nil {
		t.Fatal(err)
	}
	if e.registry, err = st.CreateRegistry(e.group.ID, "main", ""); err != nil {
		t.Fatal(err)
	}
	pu, err := st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://repo.example/maven2", Name: "repo"})
	if err != nil {
		t.Fatal(err)
	}
	e.upstream = pu.Upstream
	levels := map[string]int{"guest": store.Guest, "reporter": store.Reporter, "developer": store.Developer,
		"maintainer": store.Maintainer, "owner": store.Owner, "outsider": 0}
	for role, level := range levels {
		e.tokens[role] = e.member(role, level, store.ScopeAPI)
	}
	// A maintainer whose token may only read.
	e.tokens["maintainer_read_api"] = e.member("maintainer_ro", store.Maintainer, store.ScopeReadAPI)
	e.tokens["deploy"] = "gldt-cache-entries-deploy-token"
	if _, err := st.CreateDeployToken(store.NewDeployToken{GroupID: e.group.ID, Name: "ci",
		Scopes: []string{store.ScopeReadVirtualRegistry}, Plain: e.tokens["deploy"]}); err != nil {
		t.Fatal(err)
	}
	return e
}

// member creates a user with one token of the given scope, adds it to the
// group at level (none when 0) and returns the token value.
func (e *ceEnv) member(name string, level int, scope string) string {
	e.t.Helper()
	u, plain := newUserWithToken(e.t, e.st, name, name, scope)
	if level > 0 {
		if _, err := e.st.AddGroupMember(e.group.ID, u.ID, level, nil); err != nil {
			e.t.Fatal(err)
		}
	}
	return plain
}

// put caches a file of the env's upstream (or another) and moves the clock
// on by a second, so the next entry is newer.
func (e *ceEnv) put(upstreamID int64, rel string) store.CacheEntry {
	e.t.Helper()
	body := "content of " + rel
	ce, err := e.st.PutCacheEntry(store.CacheEntry{
		UpstreamID: upstreamID, RelativePath: rel, Size: int64(len(body)),
		MD5: strings.Repeat("a", 32), SHA1: strings.Repeat("b", 40), SHA256: fmt.Sprintf("%064x", len(rel)),
		SHA512: strings.Repeat("d", 128), ContentType: "application/java-archive",
		CheckedAt: e.clock.Now(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	return ce
}

func (e *ceEnv) do(method, path, role string) testResp {
	e.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if role != "" {
		if role == "deploy" {
			req.Header.Set("Deploy-Token", e.tokens[role])
		} else {
			req.Header.Set("PRIVATE-TOKEN", e.tokens[role])
		}
	}
	return serve(e.srv, req)
}

func (e *ceEnv) listPath(upstreamID int64, query string) string {
	p := fmt.Sprintf("%s/upstreams/%d/cache_entries", vrBase, upstreamID)
	if query != "" {
		p += "?" + query
	}
	return p
}

func (e *ceEnv) list(role, query string) []map[string]any {
	e.t.Helper()
	r := e.do(http.MethodGet, e.listPath(e.upstream.ID, query), role)
	if r.status != http.StatusOK {
		e.t.Fatalf("list: status %d: %s", r.status, r.body)
	}
	var out []map[string]any
	if err := json.Unmarshal(r.body, &out); err != nil {
		e.t.Fatalf("list body %s: %v", r.body, err)
	}
	return out
}

func relPaths(list []map[string]any) []string {
	out := make([]string, 0, len(list))
	for _, m := range list {
		out = append(out, m["relative_path"].(string))
	}
	return out
}

func deletePath(id string) string { return vrBase + "/cache_entries/" + id }

// --- ids ---

func TestCacheEntryIDEncode(t *testing.T) {
	tests := []struct {
		name     string
		upstream int64
		rel      string
		want     string
	}{
		// The example of the GitLab reference (§6).
		{"reference example", 12, "/org/example/lib/1.2/lib-1.2.jar", "MTIgL29yZy9leGFtcGxlL2xpYi8xLjIvbGliLTEuMi5qYXI="},
		// "?>" and "?" encode to "/" and "+" in the standard alphabet.
		{"url-safe alphabet", 1, "/a?>/b?", "MSAvYT8-L2I_"},
		{"two padding characters", 7, "/x", "NyAveA=="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := encodeCacheEntryID(tt.upstream, tt.rel)
			if got != tt.want {
				t.Fatalf("encodeCacheEntryID(%d, %q) = %q, want %q", tt.upstream, tt.rel, got, tt.want)
			}
			up, rel, err := decodeCacheEntryID(got)
			if err != nil || up != tt.upstream || rel != tt.rel {
				t.Fatalf("decodeCacheEntryID(%q) = %d, %q, %v", got, up, rel, err)
			}
		})
	}
}

func TestDecodeCacheEntryID(t *testing.T) {
	enc := func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }
	std := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	long := "/" + strings.Repeat("a", store.MaxRelativePath-1)
	tests := []struct {
		name     string
		id       string
		upstream int64
		rel      string
		ok       bool
	}{
		{"canonical", enc("12 /org/example/lib/1.2/lib-1.2.jar"), 12, "/org/example/lib/1.2/lib-1.2.jar", true},
		{"without padding", strings.TrimRight(enc("7 /x"), "="), 7, "/x", true},
		{"standard alphabet", std("1 /a?>/b?"), 1, "/a?>/b?", true},
		{"split on the first space only", enc("3 /dir with space/a b.jar"), 3, "/dir with space/a b.jar", true},
		{"longest path", enc("9223372036854775807 " + long), 9223372036854775807, long, true},

		{"empty", "", 0, "", false},
		{"not base64", "not*base64", 0, "", false},
		{"newline inside", enc("12 /a/b.jar")[:4] + "\n" + enc("12 /a/b.jar")[4:], 0, "", false},
		{"padding in the middle", "NyA=veA=", 0, "", false},
		{"too much padding", "NyAveA===", 0, "", false},
		{"padding on a short group", "NyAveA=", 0, "", false},
		{"impossible length", "NyAve", 0, "", false},
		{"non-zero trailing bits", "NyAveB==", 0, "", false},
		{"no space", enc("12/a.jar"), 0, "", false},
		{"no leading slash", enc("12 a.jar"), 0, "", false},
		{"empty path", enc("12 "), 0, "", false},
		{"leading space", enc(" 12 /a.jar"), 0, "", false},
		{"zero upstream", enc("0 /a.jar"), 0, "", false},
		{"leading zero", enc("012 /a.jar"), 0, "", false},
		{"signed", enc("+12 /a.jar"), 0, "", false},
		{"negative", enc("-12 /a.jar"), 0, "", false},
		{"overflow", enc("9223372036854775808 /a.jar"), 0, "", false},
		{"path too long", enc("1 " + long + "a"), 0, "", false},
		{"id far too long", strings.Repeat("A", maxCacheEntryIDLen+4), 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, rel, err := decodeCacheEntryID(tt.id)
			if !tt.ok {
				if err == nil {
					t.Fatalf("decodeCacheEntryID(%q) = %d, %q; want an error", tt.id, up, rel)
				}
				return
			}
			if err != nil || up != tt.upstream || rel != tt.rel {
				t.Fatalf("decodeCacheEntryID(%q) = %d, %q, %v; want %d, %q", tt.id, up, rel, err, tt.upstream, tt.rel)
			}
		})
	}
}

// FuzzCacheEntryID: decoding never panics; whatever decodes re-encodes to an
// id that decodes to the same entry; every entry's id decodes to it.
func FuzzCacheEntryID(f *testing.F) {
	f.Add("MTIgL29yZy9leGFtcGxlL2xpYi8xLjIvbGliLTEuMi5qYXI=", int64(12), "/org/example/lib/1.2/lib-1.2.jar")
	f.Add("MSAvYT8+L2I/", int64(1), "/a?>/b?")
	f.Add("NyAveA", int64(7), "/x")
	f.Add("", int64(0), "")
	f.Add("====", int64(-1), "no slash")
	f.Add("MyAvZGlyIHdpdGggc3BhY2UvYSBiLmphcg==", int64(3), "/dir with space/a b.jar")
	f.Fuzz(func(t *testing.T, id string, upstream int64, rel string) {
		if up, p, err := decodeCacheEntryID(id); err == nil {
			if up < 1 || p == "" || p[0] != '/' || len(p) > store.MaxRelativePath {
				t.Fatalf("decodeCacheEntryID(%q) accepted %d, %q", id, up, p)
			}
			canon := encodeCacheEntryID(up, p)
			up2, p2, err := decodeCacheEntryID(canon)
			if err != nil || up2 != up || p2 != p {
				t.Fatalf("re-encoded %q -> %q -> %d, %q, %v; want %d, %q", id, canon, up2, p2, err, up, p)
			}
		}
		if upstream < 1 || rel == "" || rel[0] != '/' || len(rel) > store.MaxRelativePath {
			return
		}
		id2 := encodeCacheEntryID(upstream, rel)
		up, p, err := decodeCacheEntryID(id2)
		if err != nil || up != upstream || p != rel {
			t.Fatalf("round trip of %d, %q via %q = %d, %q, %v", upstream, rel, id2, up, p, err)
		}
	})
}

// --- list ---

func TestListCacheEntriesJSON(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	created := e.clock.Now()
	e.put(e.upstream.ID, "/org/example/lib/1.2/lib-1.2.jar")
	list := e.list("guest", "")
	if len(list) != 1 {
		t.Fatalf("list = %v", list)
	}
	ts := created.Format("2006-01-02T15:04:05.000Z")
	want := fmt.Sprintf(`{"id":"%s","group_id":%d,"upstream_id":%d,"upstream_checked_at":"%s",`+
		`"file_md5":"%s","file_sha1":"%s","size":%d,"relative_path":"/org/example/lib/1.2/lib-1.2.jar",`+
		`"content_type":"application/java-archive","upstream_etag":null,"created_at":"%s","updated_at":"%s",`+
		`"downloads_count":0,"downloaded_at":null}`,
		encodeCacheEntryID(e.upstream.ID, "/org/example/lib/1.2/lib-1.2.jar"), e.group.ID, e.upstream.ID, ts,
		strings.Repeat("a", 32), strings.Repeat("b", 40), len("content of /org/example/lib/1.2/lib-1.2.jar"), ts, ts)
	r := e.do(http.MethodGet, e.listPath(e.upstream.ID, ""), "guest")
	if got := strings.TrimSpace(string(r.body)); got != "["+want+"]" {
		t.Fatalf("body\n got %s\nwant [%s]", got, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
}

func TestListCacheEntriesOptionalFields(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	downloaded := time.Date(2026, 11, 22, 8, 0, 0, 456e6, time.UTC)
	_, err := e.st.PutCacheEntry(store.CacheEntry{UpstreamID: e.upstream.ID, RelativePath: "/a/b/1/b-1.pom",
		Size: 3, SHA1: strings.Repeat("1", 40), SHA256: strings.Repeat("2", 64), ContentType: "text/xml",
		ETag: `"abc"`, CheckedAt: e.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.AddDownloads([]store.DownloadCount{{UpstreamID: e.upstream.ID, Rel: "/a/b/1/b-1.pom", Count: 3, Last: downloaded}}); err != nil {
		t.Fatal(err)
	}
	got := e.list("guest", "")[0]
	checks := []struct {
		field string
		want  any
	}{
		{"upstream_etag", `"abc"`},
		{"file_md5", nil}, // blank md5 (FIPS in GitLab) is null
		{"downloads_count", float64(3)},
		{"downloaded_at", "2026-11-22T08:00:00.456Z"},
		{"content_type", "text/xml"},
	}
	for _, c := range checks {
		if got[c.field] != c.want {
			t.Errorf("%s = %#v, want %#v", c.field, got[c.field], c.want)
		}
	}
}

func TestListCacheEntriesOrderSearchAndPages(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	other, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://other.example/m2", Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{
		"/com/google/guava/guava/31.1-jre/guava-31.1-jre.jar",
		"/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.pom",
		"/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar",
		"/junit/junit/4.13.2/junit-4.13.2.jar",
		"/junit/junit/4.13.2/JUnit-4.13.2.pom",
	}
	for _, p := range paths {
		e.put(e.upstream.ID, p)
	}
	e.put(other.ID, "/org/apache/commons/commons-lang3/3.12.0/other.jar")

	tests := []struct {
		name  string
		query string
		want  []string // in order
		total string
		next  string
		prev  string
		pages string
	}{
		{"newest first", "", []string{paths[4], paths[3], paths[2], paths[1], paths[0]}, "5", "", "", "1"},
		{"search is a case-insensitive substring", "search=COMMONS-lang3", []string{paths[2], paths[1]}, "2", "", "", "1"},
		{"search matches across case", "search=junit-4", []string{paths[4], paths[3]}, "2", "", "", "1"},
		{"blank search does not filter", "search=%20", []string{paths[4], paths[3], paths[2], paths[1], paths[0]}, "5", "", "", "1"},
		{"no match", "search=nothing-like-this", []string{}, "0", "", "", "1"},
		{"first page", "per_page=2", []string{paths[4], paths[3]}, "5", "2", "", "3"},
		{"middle page", "per_page=2&page=2", []string{paths[2], paths[1]}, "5", "3", "1", "3"},
		{"last page", "per_page=2&page=3", []string{paths[0]}, "5", "", "2", "3"},
		{"beyond the last page", "per_page=2&page=9", []string{}, "5", "", "3", "3"},
		{"search and pages", "search=.jar&per_page=2&page=2", []string{paths[0]}, "3", "", "1", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodGet, e.listPath(e.upstream.ID, tt.query), "guest")
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var list []map[string]any
			if err := json.Unmarshal(r.body, &list); err != nil {
				t.Fatal(err)
			}
			if got := relPaths(list); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("paths\n got %q\nwant %q", got, tt.want)
			}
			for h, want := range map[string]string{"X-Total": tt.total, "X-Next-Page": tt.next,
				"X-Prev-Page": tt.prev, "X-Total-Pages": tt.pages} {
				if got := r.header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			if link := r.header.Get("Link"); !strings.Contains(link, `rel="first"`) ||
				!strings.HasPrefix(link, "<http://registry.example:8081"+vrBase) {
				t.Errorf("Link = %q", link)
			}
		})
	}
}

func TestListCacheEntriesBadRequests(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	tests := []struct {
		name   string
		path   string
		status int
		body   string
	}{
		{"per_page zero", e.listPath(e.upstream.ID, "per_page=0"), 400, `{"error":"per_page does not have a valid value"}`},
		{"page not a number", e.listPath(e.upstream.ID, "page=x"), 400, `{"error":"page is invalid"}`},
		{"upstream id not a number", vrBase + "/upstreams/abc/cache_entries", 400, `{"error":"id is invalid"}`},
		{"unknown upstream", e.listPath(999, ""), 404, `{"message":"404 Upstream Not Found"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodGet, tt.path, "root")
			if r.status != tt.status || strings.TrimSpace(string(r.body)) != tt.body {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.body)
			}
		})
	}
}

// --- delete ---

func TestDeleteCacheEntry(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	keep := e.put(e.upstream.ID, "/g/a/1/a-1.pom")
	gone := e.put(e.upstream.ID, "/g/a/1/a-1.jar")
	spaced := e.put(e.upstream.ID, "/g/a/1/a 1.jar")

	r := e.do(http.MethodDelete, deletePath(encodeCacheEntryID(gone.UpstreamID, gone.RelativePath)), "maintainer")
	if r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("delete: %d %q", r.status, r.body)
	}
	if got := relPaths(e.list("maintainer", "")); strings.Join(got, ",") != spaced.RelativePath+","+keep.RelativePath {
		t.Fatalf("after delete the list is %q", got)
	}
	if _, err := e.st.CacheEntry(gone.UpstreamID, gone.RelativePath); err == nil {
		t.Fatal("the deleted entry is still live in the store")
	}
	if st := e.st.CacheStats(); st.Pending != 1 || st.Entries != 2 {
		t.Fatalf("stats after delete = %+v, want 1 pending and 2 live", st)
	}
	// A path with a space: split on the first space only.
	r = e.do(http.MethodDelete, deletePath(encodeCacheEntryID(spaced.UpstreamID, spaced.RelativePath)), "owner")
	if r.status != http.StatusNoContent {
		t.Fatalf("delete of a path with a space: %d %s", r.status, r.body)
	}
	// The id as a client with a standard-alphabet, unpadded encoder sends it.
	stdID := base64.RawStdEncoding.EncodeToString([]byte(fmt.Sprintf("%d %s", keep.UpstreamID, keep.RelativePath)))
	r = e.do(http.MethodDelete, deletePath(stdID), "root")
	if r.status != http.StatusNoContent {
		t.Fatalf("delete with a standard-alphabet id %q: %d %s", stdID, r.status, r.body)
	}
	if got := e.list("root", ""); len(got) != 0 {
		t.Fatalf("list after deleting everything = %v", got)
	}
}

func TestDeleteCacheEntryErrors(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	entry := e.put(e.upstream.ID, "/g/a/1/a-1.jar")
	id := encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)
	tests := []struct {
		name   string
		id     string
		status int
		body   string
	}{
		{"undecodable", "%2A%2A%2A", 400, `{"error":"id is invalid"}`},
		{"decodes to no space", base64.URLEncoding.EncodeToString([]byte("12")), 400, `{"error":"id is invalid"}`},
		{"path without slash", base64.URLEncoding.EncodeToString([]byte("12 a.jar")), 400, `{"error":"id is invalid"}`},
		{"unknown path", encodeCacheEntryID(entry.UpstreamID, "/g/a/1/nope.jar"), 404, `{"message":"404 Not found"}`},
		{"unknown upstream", encodeCacheEntryID(999, entry.RelativePath), 404, `{"message":"404 Not found"}`},
		{"case matters in paths", encodeCacheEntryID(entry.UpstreamID, "/G/A/1/A-1.JAR"), 404, `{"message":"404 Not found"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodDelete, deletePath(tt.id), "root")
			if r.status != tt.status || strings.TrimSpace(string(r.body)) != tt.body {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.body)
			}
		})
	}
	// Deleting twice: the second finds nothing live.
	if r := e.do(http.MethodDelete, deletePath(id), "root"); r.status != http.StatusNoContent {
		t.Fatalf("first delete: %d %s", r.status, r.body)
	}
	r := e.do(http.MethodDelete, deletePath(id), "root")
	if r.status != http.StatusNotFound || strings.TrimSpace(string(r.body)) != `{"message":"404 Not found"}` {
		t.Fatalf("second delete: %d %s", r.status, r.body)
	}
	// A GET on the delete route is a 405 with GitLab's body.
	if r := e.do(http.MethodGet, deletePath(id), "root"); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET on the entry: %d %s", r.status, r.body)
	}
}

// --- permissions ---

func TestCacheEntriesPermissions(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	tests := []struct {
		role       string
		listStatus int
		delStatus  int
	}{
		{"", 401, 401},
		{"deploy", 401, 401}, // deploy tokens are for downloads only
		{"outsider", 404, 404},
		{"guest", 200, 403},
		{"reporter", 200, 403},
		{"developer", 200, 403},
		{"maintainer_read_api", 200, 403},
		{"maintainer", 200, 204},
		{"owner", 200, 204},
		{"root", 200, 204},
	}
	for _, tt := range tests {
		name := tt.role
		if name == "" {
			name = "anonymous"
		}
		t.Run(name, func(t *testing.T) {
			entry := e.put(e.upstream.ID, "/perm/"+name+"/x-1.jar")
			r := e.do(http.MethodGet, e.listPath(e.upstream.ID, ""), tt.role)
			if r.status != tt.listStatus {
				t.Fatalf("list: %d %s, want %d", r.status, r.body, tt.listStatus)
			}
			r = e.do(http.MethodDelete, deletePath(encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)), tt.role)
			if r.status != tt.delStatus {
				t.Fatalf("delete: %d %s, want %d", r.status, r.body, tt.delStatus)
			}
			_, err := e.st.CacheEntry(entry.UpstreamID, entry.RelativePath)
			if live := err == nil; live != (tt.delStatus != 204) {
				t.Fatalf("entry live = %v after a %d delete", live, tt.delStatus)
			}
		})
	}
}

func TestCacheEntriesFeatureOff(t *testing.T) {
	e := newCacheEntryEnv(t, func(o *serverOptions) { o.auth.DisableVirtualRegistry = true })
	entry := e.put(e.upstream.ID, "/g/a/1/a-1.jar")
	for _, r := range []testResp{
		e.do(http.MethodGet, e.listPath(e.upstream.ID, ""), "root"),
		e.do(http.MethodDelete, deletePath(encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)), "root"),
		e.do(http.MethodDelete, deletePath("***"), ""),
	} {
		if r.status != 404 || strings.TrimSpace(string(r.body)) != `{"message":"404 Not Found"}` {
			t.Fatalf("with the feature off: %d %s", r.status, r.body)
		}
	}
	if _, err := e.st.CacheEntry(entry.UpstreamID, entry.RelativePath); err != nil {
		t.Fatalf("the entry was deleted with the feature off: %v", err)
	}
}

// TestPendingEntriesNeverListed: entries marked by any of the three deletes
// are gone from the list, the search and the delete endpoint at once, and
// stay gone after the collector ran.
func TestPendingEntriesNeverListed(t *testing.T) {
	tests := []struct {
		name string
		mark func(e *ceEnv, entries []store.CacheEntry)
	}{
		{"single delete", func(e *ceEnv, entries []store.CacheEntry) {
			for _, c := range entries {
				if err := e.st.DeleteCacheEntry(c.UpstreamID, c.RelativePath); err != nil {
					e.t.Fatal(err)
				}
			}
		}},
		{"upstream purge", func(e *ceEnv, _ []store.CacheEntry) {
			if _, err := e.st.PurgeUpstreamCache(e.upstream.ID); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"registry purge", func(e *ceEnv, _ []store.CacheEntry) {
			if _, err := e.st.PurgeRegistryCache(e.registry.ID); err != nil {
				e.t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCacheEntryEnv(t, nil)
			entries := []store.CacheEntry{e.put(e.upstream.ID, "/p/q/1/q-1.jar"), e.put(e.upstream.ID, "/p/q/1/q-1.pom")}
			if got := e.list("root", ""); len(got) != 2 {
				t.Fatalf("before: %v", got)
			}
			tt.mark(e, entries)
			if st := e.st.CacheStats(); st.Pending != 2 {
				t.Fatalf("pending = %d, want 2", st.Pending)
			}
			for _, q := range []string{"", "search=q-1", "per_page=100"} {
				r := e.do(http.MethodGet, e.listPath(e.upstream.ID, q), "root")
				if strings.TrimSpace(string(r.body)) != "[]" || r.header.Get("X-Total") != "0" {
					t.Fatalf("list %q with pending entries: %s (X-Total %s)", q, r.body, r.header.Get("X-Total"))
				}
			}
			for _, c := range entries {
				if r := e.do(http.MethodDelete, deletePath(encodeCacheEntryID(c.UpstreamID, c.RelativePath)), "root"); r.status != 404 {
					t.Fatalf("delete of a pending entry: %d %s", r.status, r.body)
				}
			}
			col, err := e.st.CollectPending(10)
			if err != nil || col.Entries != 2 {
				t.Fatalf("collect = %+v, %v", col, err)
			}
			if got := e.list("root", ""); len(got) != 0 {
				t.Fatalf("after collection: %v", got)
			}
			// A fresh fill of the same path is listed again.
			e.put(e.upstream.ID, "/p/q/1/q-1.jar")
			if got := relPaths(e.list("root", "")); len(got) != 1 || got[0] != "/p/q/1/q-1.jar" {
				t.Fatalf("after refill: %v", got)
			}
		})
	}
}
