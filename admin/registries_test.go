package admin

import (
	"fmt"
	"net/http"
	"testing"
)

func TestRegistryMergeMetadata(t *testing.T) {
	e := newUpstreamEnv(t)
	create := fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven/registries", e.group.ID)
	regPath := func(m map[string]any) string {
		return fmt.Sprintf("%s/registries/%d", vrBase, int64(m["id"].(float64)))
	}

	// Default on, and shown by every registry answer.
	m := object(t, e.send(http.MethodPost, create, "maintainer", `{"name":"merging"}`).want(t, 201))
	if m["merge_metadata"] != true {
		t.Fatalf("created %v", m)
	}
	off := object(t, e.send(http.MethodPost, create, "maintainer", `{"name":"first-answer","merge_metadata":false}`).want(t, 201))
	if off["merge_metadata"] != false {
		t.Fatalf("created %v", off)
	}
	if got := object(t, e.do(http.MethodGet, regPath(off), "guest").want(t, 200)); got["merge_metadata"] != false {
		t.Fatalf("get %v", got)
	}
	for _, item := range e.do(http.MethodGet, create, "guest").want(t, 200).list(t) {
		if want := item["name"] != "first-answer"; item["merge_metadata"] != want {
			t.Fatalf("list item %v", item)
		}
	}
	if got := object(t, e.do(http.MethodGet, fmt.Sprintf("%s/registries/%d", vrBase, e.registry.ID), "guest").want(t, 200)); got["merge_metadata"] != true {
		t.Fatalf("a registry made before: %v", got)
	}

	// PATCH switches it; a PATCH without it keeps it; strings as Grape coerces.
	p := object(t, e.send(http.MethodPatch, regPath(m), "maintainer", `{"name":"merging","merge_metadata":false}`).want(t, 200))
	if p["merge_metadata"] != false {
		t.Fatalf("patched %v", p)
	}
	p = object(t, e.send(http.MethodPatch, regPath(m), "maintainer", `{"name":"renamed"}`).want(t, 200))
	if p["merge_metadata"] != false || p["name"] != "renamed" {
		t.Fatalf("patched %v", p)
	}
	p = object(t, e.send(http.MethodPatch, regPath(m), "maintainer", `{"name":"renamed","merge_metadata":"true"}`).want(t, 200))
	if p["merge_metadata"] != true {
		t.Fatalf("patched %v", p)
	}
	reg, err := e.st.Registry(int64(m["id"].(float64)))
	if err != nil || !reg.MergeMetadata() {
		t.Fatalf("stored %+v, %v", reg, err)
	}

	wantBody(t, e.send(http.MethodPost, create, "maintainer", `{"name":"x","merge_metadata":"sometimes"}`),
		400, `{"error":"merge_metadata is invalid"}`)
	wantBody(t, e.send(http.MethodPatch, regPath(m), "maintainer", `{"name":"renamed","merge_metadata":[true]}`),
		400, `{"error":"merge_metadata is invalid"}`)
	// PATCH still requires name, as the spec says.
	wantBody(t, e.send(http.MethodPatch, regPath(m), "maintainer", `{"merge_metadata":false}`), 400, `{"error":"name is missing"}`)
	wantBody(t, e.send(http.MethodPatch, regPath(m), "developer", `{"name":"x","merge_metadata":false}`), 403, `{"message":"403 Forbidden"}`)
}
