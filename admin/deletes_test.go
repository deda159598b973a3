package admin

import (
	"fmt"
	"net/http"
	"testing"

	"registryd/store"
)

// TestDeleteGroupAPI: DELETE /groups/:id is GitLab's: owners (and admins)
// only, 202 {"message":"202 Accepted"}; the group, its project, registry,
// upstream, cache entries and deploy tokens are gone when it answers, and
// the members' own tokens still work.
func TestDeleteGroupAPI(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	e.put(e.upstream.ID, "/org/x/1.0/x-1.0.jar")
	pr, err := e.st.CreateProject(store.NewProject{Name: "app", NamespaceID: e.group.ID})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/api/v4/groups/%d", e.group.ID)
	for role, status := range map[string]int{
		"outsider": http.StatusNotFound, // a private group it cannot see
		"guest":    http.StatusForbidden, "developer": http.StatusForbidden, "maintainer": http.StatusForbidden,
		"maintainer_read_api": http.StatusForbidden,
		"":                    http.StatusUnauthorized,
	} {
		if got := e.do(http.MethodDelete, path, role); got.status != status {
			t.Errorf("%s: status %d, want %d: %s", role, got.status, status, got.body)
		}
	}
	e.do(http.MethodGet, path, "owner").want(t, http.StatusOK)

	res := e.do(http.MethodDelete, "/api/v4/groups/acme", "owner").want(t, http.StatusAccepted)
	if m := object(t, res); m["message"] != "202 Accepted" {
		t.Errorf("body %s", res.body)
	}
	e.do(http.MethodGet, path, "root").want(t, http.StatusNotFound)
	e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d", pr.ID), "root").want(t, http.StatusNotFound)
	e.do(http.MethodGet, fmt.Sprintf("%s/registries/%d", vrBase, e.registry.ID), "root").want(t, http.StatusNotFound)
	e.do(http.MethodGet, e.listPath(e.upstream.ID, ""), "root").want(t, http.StatusNotFound)
	e.do(http.MethodGet, "/api/v4/groups", "deploy").want(t, http.StatusUnauthorized)
	e.do(http.MethodGet, "/api/v4/user", "owner").want(t, http.StatusOK)
	e.do(http.MethodDelete, path, "root").want(t, http.StatusNotFound)
	if len(e.do(http.MethodGet, "/api/v4/groups", "root").want(t, http.StatusOK).list(t)) != 0 {
		t.Error("GET /groups still lists a group")
	}
}

// TestDeleteProjectAPI: DELETE /projects/:id needs the owner level (a
// maintainer of the group may not), answers 202, and the project is gone.
func TestDeleteProjectAPI(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	pr, err := e.st.CreateProject(store.NewProject{Name: "app", NamespaceID: e.group.ID})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/api/v4/projects/%d", pr.ID)
	e.do(http.MethodDelete, path, "outsider").want(t, http.StatusNotFound)
	e.do(http.MethodDelete, path, "maintainer").want(t, http.StatusForbidden)
	e.do(http.MethodDelete, path, "owner").want(t, http.StatusAccepted)
	e.do(http.MethodGet, path, "root").want(t, http.StatusNotFound)
	e.do(http.MethodGet, "/api/v4/projects/acme%2Fapp", "root").want(t, http.StatusNotFound)
	e.do(http.MethodDelete, path, "root").want(t, http.StatusNotFound)
	// The group stays.
	e.do(http.MethodGet, fmt.Sprintf("/api/v4/groups/%d", e.group.ID), "owner").want(t, http.StatusOK)
}

// TestDeleteUserAPI: DELETE /users/:id is for admins; 204; a sole owner of
// a group is 409 unless hard_delete=true, which takes the group with them;
// the last admin is 409; a deleted user's token no longer signs in.
func TestDeleteUserAPI(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	owner, err := e.st.UserByUsername("owner")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := e.st.UserByUsername("developer")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := e.st.CreateProject(store.NewProject{Name: "app", NamespaceID: e.group.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AddProjectMember(pr.ID, dev.ID, store.Developer, nil, owner.ID); err != nil {
		t.Fatal(err)
	}
	path := func(id int64) string { return fmt.Sprintf("/api/v4/users/%d", id) }
	e.do(http.MethodDelete, path(dev.ID), "owner").want(t, http.StatusForbidden)
	e.do(http.MethodDelete, path(9999), "root").want(t, http.StatusNotFound)

	e.do(http.MethodDelete, path(dev.ID), "root").want(t, http.StatusNoContent)
	e.do(http.MethodGet, path(dev.ID), "root").want(t, http.StatusNotFound)
	// Their joined event stays, by an author who is gone.
	evs := e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events", pr.ID), "root").want(t, http.StatusOK).list(t)
	if len(evs) != 1 || evs[0]["author_id"] != float64(dev.ID) || evs[0]["author_username"] != "" {
		t.Fatalf("events after a soft delete: %v", evs)
	}
	if _, has := evs[0]["author"]; has {
		t.Fatalf("an event of a deleted user has an author: %v", evs[0])
	}
	e.do(http.MethodGet, "/api/v4/user", "developer").want(t, http.StatusUnauthorized)
	e.do(http.MethodGet, fmt.Sprintf("/api/v4/groups/%d", e.group.ID), "owner").want(t, http.StatusOK)

	res := e.do(http.MethodDelete, path(owner.ID), "root").want(t, http.StatusConflict)
	if m := object(t, res); m["message"] != "User cannot be removed while is the sole-owner of a group" {
		t.Errorf("409 body %s", res.body)
	}
	e.do(http.MethodDelete, path(owner.ID)+"?hard_delete=true", "root").want(t, http.StatusNoContent)
	e.do(http.MethodGet, fmt.Sprintf("/api/v4/groups/%d", e.group.ID), "root").want(t, http.StatusNotFound)

	root, err := e.st.UserByUsername("root")
	if err != nil {
		t.Fatal(err)
	}
	e.do(http.MethodDelete, path(root.ID), "root").want(t, http.StatusConflict)
	e.do(http.MethodGet, "/api/v4/user", "root").want(t, http.StatusOK)
}
