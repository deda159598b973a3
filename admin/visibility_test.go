package admin

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"registryd/store"
)

// legacyVisibility rewrites stored visibilities as a registryd without the
// parent rule could have written them (bucket -> id -> visibility), then
// reopens the database and the server. The store refuses such records
// since, so only the file can hold them; the test reaches into it with the
// bucket names and the JSON field of the store's schema.
func (e *listEnv) legacyVisibility(patch map[string]map[int64]string) {
	e.t.Helper()
	if err := e.st.Close(); err != nil {
		e.t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(e.dir, "registry.db"), 0o600, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for bucket, ids := range patch {
			b := tx.Bucket([]byte(bucket))
			for id, vis := range ids {
				key := binary.BigEndian.AppendUint64(nil, uint64(id))
				var rec map[string]any
				if err := json.Unmarshal(b.Get(key), &rec); err != nil {
					return fmt.Errorf("%s %d: %w", bucket, id, err)
				}
				rec["visibility"] = vis
				raw, err := json.Marshal(rec)
				if err != nil {
					return err
				}
				if err := b.Put(key, raw); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.st, e.srv, e.clock = newTestServerIn(e.t, e.dir, listRootToken, nil)
}

// post sends a JSON body as role.
func (e *listEnv) post(path, role, body string) testResp {
	e.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PRIVATE-TOKEN", e.tokens[role])
	return serve(e.srv, req)
}

// TestChildNotMoreVisibleThanParent: creating a project or subgroup more
// visible than its group is refused with GitLab's 400.
func TestChildNotMoreVisibleThanParent(t *testing.T) {
	e := newListEnv(t, nil)
	e.groupMember("hidden", "carol", store.Owner)
	e.groupMember("int", "carol", store.Owner)
	hidden, internal := e.groups["hidden"].ID, e.groups["int"].ID
	before := len(e.get("/api/v4/projects", "root").list(t))
	wantBody(t, e.post("/api/v4/projects", "carol", fmt.Sprintf(`{"name":"pubapp","namespace_id":%d,"visibility":"public"}`, hidden)),
		400, `{"message":{"visibility_level":["public is not allowed in a private group."]}}`)
	wantBody(t, e.post("/api/v4/projects", "carol", fmt.Sprintf(`{"name":"intapp","namespace_id":%d,"visibility":"internal"}`, hidden)),
		400, `{"message":{"visibility_level":["internal is not allowed in a private group."]}}`)
	wantBody(t, e.post("/api/v4/projects", "carol", fmt.Sprintf(`{"name":"pubapp","namespace_id":%d,"visibility":"public"}`, internal)),
		400, `{"message":{"visibility_level":["public is not allowed in a internal group."]}}`)
	wantBody(t, e.post("/api/v4/groups", "carol", fmt.Sprintf(`{"name":"pubsub","path":"pubsub","parent_id":%d,"visibility":"public"}`, hidden)),
		400, `{"message":{"visibility_level":["public is not allowed since the parent group has a private visibility."]}}`)
	wantBody(t, e.post("/api/v4/groups", "carol", fmt.Sprintf(`{"name":"pubsub","path":"pubsub","parent_id":%d,"visibility":"public"}`, internal)),
		400, `{"message":{"visibility_level":["public is not allowed since the parent group has a internal visibility."]}}`)
	if after := len(e.get("/api/v4/projects", "root").list(t)); after != before {
		t.Fatalf("%d projects after refusals, %d before", after, before)
	}
	// As visible as the parent, or less, is fine.
	e.post("/api/v4/projects", "carol", fmt.Sprintf(`{"name":"intapp","namespace_id":%d,"visibility":"internal"}`, internal)).want(t, 201)
	e.post("/api/v4/groups", "carol", fmt.Sprintf(`{"name":"privsub","path":"privsub","parent_id":%d,"visibility":"private"}`, internal)).want(t, 201)
}

// TestLegacyPublicChildOfPrivateGroup replays review 12 #1 on a database
// written before the rule: carol owns the private group hidden, which holds
// a public project pubapp and a public subgroup pubsub (with its own public
// project). erin, a member of nothing, learns nothing of hidden through
// them; carol still sees them, as private.
func TestLegacyPublicChildOfPrivateGroup(t *testing.T) {
	e := newListEnv(t, nil)
	e.groupMember("hidden", "carol", store.Owner)
	e.project("pubapp", "hidden", store.Private)
	e.group("pubsub", "hidden", store.Private)
	e.project("subapp", "pubsub", store.Private)
	app, sub, subapp := e.projs["pubapp"].ID, e.groups["pubsub"].ID, e.projs["subapp"].ID
	e.legacyVisibility(map[string]map[int64]string{
		"projects": {app: store.Public, subapp: store.Public},
		"groups":   {sub: store.Public},
	})

	noHidden := func(r testResp) {
		t.Helper()
		r.want(t, http.StatusOK)
		for _, leak := range []string{"hidden", "Hidden", "pubsub", "pubapp", "subapp"} {
			if strings.Contains(string(r.body), leak) {
				t.Fatalf("erin sees %q: %s", leak, r.body)
			}
		}
	}
	noHidden(e.get("/api/v4/projects", "erin"))
	noHidden(e.get("/api/v4/projects?visibility=public", "erin"))
	noHidden(e.get("/api/v4/projects?search=app", "erin"))
	noHidden(e.get("/api/v4/groups", "erin"))
	noHidden(e.get("/api/v4/groups?all_available=true", "erin"))
	noHidden(e.get("/api/v4/groups?all_available=true&visibility=public", "erin"))
	for _, path := range []string{
		fmt.Sprintf("/api/v4/projects/%d", app),
		"/api/v4/projects/hidden%2Fpubapp",
		fmt.Sprintf("/api/v4/projects/%d/members/all", app),
		fmt.Sprintf("/api/v4/projects/%d/members", app),
		fmt.Sprintf("/api/v4/projects/%d", subapp),
		fmt.Sprintf("/api/v4/projects/%d/members/all", subapp),
	} {
		wantBody(t, e.get(path, "erin"), 404, `{"message":"404 Project Not Found"}`)
	}
	for _, path := range []string{
		fmt.Sprintf("/api/v4/groups/%d", sub),
		fmt.Sprintf("/api/v4/groups/%d/members/all", sub),
		fmt.Sprintf("/api/v4/groups/%d", e.groups["hidden"].ID),
	} {
		wantBody(t, e.get(path, "erin"), 404, `{"message":"404 Group Not Found"}`)
	}

	// The owner sees all of it, private as it really is.
	wantNames(t, e.get("/api/v4/projects?search=app&order_by=name&sort=asc", "carol"), "path", "pubapp", "subapp", "teamapp")
	for _, item := range e.get("/api/v4/projects?search=app", "carol").list(t) {
		if item["visibility"] != store.Private {
			t.Fatalf("carol sees %v as %v", item["path"], item["visibility"])
		}
	}
	var g map[string]any
	if err := json.Unmarshal(e.get(fmt.Sprintf("/api/v4/groups/%d", sub), "carol").want(t, 200).body, &g); err != nil {
		t.Fatal(err)
	}
	if g["visibility"] != store.Private {
		t.Fatalf("carol sees pubsub as %v", g["visibility"])
	}
	// And nothing more is added under it than it allows.
	wantBody(t, e.post("/api/v4/projects", "carol", fmt.Sprintf(`{"name":"more","namespace_id":%d,"visibility":"public"}`, sub)),
		400, `{"message":{"visibility_level":["public is not allowed in a private group."]}}`)
}
