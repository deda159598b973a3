package admin

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"registryd/store"
)

func invalidatePath(id string) string { return vrBase + "/cache_entries/" + id + "/invalidate" }

func upstreamInvalidatePath(upstream any) string {
	return fmt.Sprintf("%s/upstreams/%v/cache/invalidate", vrBase, upstream)
}

func TestInvalidateCacheEntryEndpoint(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	entry := e.put(e.upstream.ID, "/g/a/1/a-1.jar")
	other := e.put(e.upstream.ID, "/g/a/1/a-1.pom")
	listed := e.list("root", "")[1] // oldest last: a-1.jar
	gen := e.st.CacheGeneration()

	r := e.do(http.MethodPost, invalidatePath(encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)), "maintainer").want(t, 200)
	if e.st.CacheGeneration() == gen {
		t.Fatal("the cache generation did not move")
	}
	// The answer is the list item plus "invalidated": true.
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got["invalidated"] != true {
		t.Fatalf("answer %s lacks invalidated: true", r.body)
	}
	delete(got, "invalidated")
	if fmt.Sprint(got) != fmt.Sprint(listed) {
		t.Fatalf("answer\n %v\nwant the list item\n %v", got, listed)
	}
	stored, err := e.st.CacheEntry(entry.UpstreamID, entry.RelativePath)
	if err != nil || !stored.Invalidated {
		t.Fatalf("stored = %+v, %v", stored, err)
	}
	// The list shows the flag on that entry only; the sibling keeps GitLab's shape.
	list := e.list("guest", "")
	if list[1]["invalidated"] != true || list[0]["relative_path"] != other.RelativePath {
		t.Fatalf("list = %v", list)
	}
	if _, has := list[0]["invalidated"]; has {
		t.Fatalf("an entry that is not invalidated shows the field: %v", list[0])
	}

	// The id as a standard-alphabet, unpadded encoder writes it: "/" inside
	// the id and the suffix after it.
	std := e.put(e.upstream.ID, "/x/??/c.jar")
	stdID := base64.RawStdEncoding.EncodeToString([]byte(fmt.Sprintf("%d %s", std.UpstreamID, std.RelativePath)))
	if !strings.Contains(stdID, "/") || strings.HasSuffix(stdID, "/") {
		t.Fatalf("test id %q needs a slash inside", stdID)
	}
	e.do(http.MethodPost, invalidatePath(stdID), "owner").want(t, 200)
	if s, _ := e.st.CacheEntry(std.UpstreamID, std.RelativePath); !s.Invalidated {
		t.Fatal("standard-alphabet id: entry not invalidated")
	}
}

func TestInvalidateCacheEntryErrors(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	entry := e.put(e.upstream.ID, "/g/a/1/a-1.jar")
	id := encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)
	tests := []struct {
		name   string
		path   string
		status int
		body   string
	}{
		{"undecodable", invalidatePath("%2A%2A%2A"), 400, `{"error":"id is invalid"}`},
		{"decodes to no space", invalidatePath(base64.URLEncoding.EncodeToString([]byte("12"))), 400, `{"error":"id is invalid"}`},
		{"unknown path", invalidatePath(encodeCacheEntryID(entry.UpstreamID, "/g/a/1/nope.jar")), 404, `{"message":"404 Not found"}`},
		{"unknown upstream", invalidatePath(encodeCacheEntryID(999, entry.RelativePath)), 404, `{"message":"404 Not found"}`},
		{"POST on the entry itself", deletePath(id), 405, `{"error":"405 Not Allowed"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodPost, tt.path, "root")
			if r.status != tt.status || strings.TrimSpace(string(r.body)) != tt.body {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.body)
			}
		})
	}
	// A pending entry is gone for invalidation too.
	if r := e.do(http.MethodDelete, deletePath(id), "root"); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if r := e.do(http.MethodPost, invalidatePath(id), "root"); r.status != 404 {
		t.Fatalf("invalidate of a pending entry: %d %s", r.status, r.body)
	}
	// Other methods on the invalidate route are not invalidations.
	if r := e.do(http.MethodGet, invalidatePath(id), "root"); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET on invalidate: %d %s", r.status, r.body)
	}
}

func TestInvalidateUpstreamCacheEndpoint(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	other, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://other.example/m2", Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a/1/a-1.jar", "/a/1/a-1.pom", "/b/2/b-2.jar"} {
		e.put(e.upstream.ID, p)
	}
	e.put(other.ID, "/a/1/a-1.jar")
	gen := e.st.CacheGeneration()
	r := e.do(http.MethodPost, upstreamInvalidatePath(e.upstream.ID), "maintainer").want(t, 200)
	if got := strings.TrimSpace(string(r.body)); got != `{"invalidated_entries_count":3}` {
		t.Fatalf("body %s", got)
	}
	if e.st.CacheGeneration() == gen {
		t.Fatal("the cache generation did not move")
	}
	for _, item := range e.list("guest", "") {
		if item["invalidated"] != true {
			t.Fatalf("not invalidated: %v", item)
		}
	}
	if s, _ := e.st.CacheEntry(other.ID, "/a/1/a-1.jar"); s.Invalidated {
		t.Fatal("another upstream's entry was invalidated")
	}
	// An upstream without entries: 0.
	empty, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://empty.example/m2", Name: "empty"})
	if err != nil {
		t.Fatal(err)
	}
	r = e.do(http.MethodPost, upstreamInvalidatePath(empty.ID), "owner").want(t, 200)
	if got := strings.TrimSpace(string(r.body)); got != `{"invalidated_entries_count":0}` {
		t.Fatalf("body %s", got)
	}

	for _, tt := range []struct {
		name   string
		path   string
		status int
		body   string
	}{
		{"unknown upstream", upstreamInvalidatePath(999), 404, `{"message":"404 Upstream Not Found"}`},
		{"id not a number", upstreamInvalidatePath("abc"), 400, `{"error":"id is invalid"}`},
		{"id zero", upstreamInvalidatePath(0), 400, `{"error":"id is invalid"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(http.MethodPost, tt.path, "root")
			if r.status != tt.status || strings.TrimSpace(string(r.body)) != tt.body {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.body)
			}
		})
	}
}

// TestInvalidatePermissions: the same matrix as the DELETE endpoints.
func TestInvalidatePermissions(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	tests := []struct {
		role   string
		status int
	}{
		{"", 401},
		{"deploy", 401},
		{"outsider", 404},
		{"guest", 403},
		{"reporter", 403},
		{"developer", 403},
		{"maintainer_read_api", 403},
		{"maintainer", 200},
		{"owner", 200},
		{"root", 200},
	}
	for _, tt := range tests {
		name := tt.role
		if name == "" {
			name = "anonymous"
		}
		t.Run(name, func(t *testing.T) {
			entry := e.put(e.upstream.ID, "/perm/"+name+"/x-1.jar")
			r := e.do(http.MethodPost, invalidatePath(encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)), tt.role)
			if r.status != tt.status {
				t.Fatalf("entry: %d %s, want %d", r.status, r.body, tt.status)
			}
			stored, err := e.st.CacheEntry(entry.UpstreamID, entry.RelativePath)
			if err != nil || stored.Invalidated != (tt.status == 200) {
				t.Fatalf("invalidated = %v after a %d (%v)", stored.Invalidated, tt.status, err)
			}
			r = e.do(http.MethodPost, upstreamInvalidatePath(e.upstream.ID), tt.role)
			if r.status != tt.status {
				t.Fatalf("upstream: %d %s, want %d", r.status, r.body, tt.status)
			}
			// Revive the entries for the next role.
			if err := e.st.TouchCacheEntry(entry.UpstreamID, entry.RelativePath, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestInvalidateFeatureOff(t *testing.T) {
	e := newCacheEntryEnv(t, func(o *serverOptions) { o.auth.DisableVirtualRegistry = true })
	entry := e.put(e.upstream.ID, "/g/a/1/a-1.jar")
	for _, r := range []testResp{
		e.do(http.MethodPost, invalidatePath(encodeCacheEntryID(entry.UpstreamID, entry.RelativePath)), "root"),
		e.do(http.MethodPost, invalidatePath("***"), ""),
		e.do(http.MethodPost, upstreamInvalidatePath(e.upstream.ID), "root"),
		e.do(http.MethodPost, upstreamInvalidatePath("abc"), ""),
	} {
		if r.status != 404 || strings.TrimSpace(string(r.body)) != `{"message":"404 Not Found"}` {
			t.Fatalf("with the feature off: %d %s", r.status, r.body)
		}
	}
	if s, _ := e.st.CacheEntry(entry.UpstreamID, entry.RelativePath); s.Invalidated {
		t.Fatal("the entry was invalidated with the feature off")
	}
}
