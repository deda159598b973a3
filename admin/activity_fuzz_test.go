package admin

import (
	"net/http"
	"strings"
	"testing"

	"registryd/store"
)

// want400 fails unless err maps to a 400 or 413 GitLab envelope; it never
// may be a 500.
func want400(t *testing.T, err error) {
	t.Helper()
	he := toHTTP(err)
	if he == nil {
		t.Fatalf("err = %v (%T) maps to a 500", err, err)
	}
	if he.status != http.StatusBadRequest && he.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d for %v", he.status, err)
	}
}

// FuzzDecodeEvents: whatever the body, an import decodes to events that
// pass the store's own check, or is a 400; it never panics.
func FuzzDecodeEvents(f *testing.F) {
	for _, s := range []string{
		`[{"project_id":1,"author_id":1,"action":"closed","target_type":"issue","target_id":3}]`,
		`{"project_id":1,"author_id":1,"action":"pushed","push_data":{"action":"created","ref_type":"tag","ref":"v1","commit_to":"abcdef0"}}` + "\n" +
			`{"project_id":1,"author_id":2,"action_name":"commented on","target_id":9,"note":{"body":"x","noteable_iid":2}}`,
		`[{"project_id":"1","author_id":1.5,"action":null,"created_at":"2026-01-01T00:00:00Z","imported":true}]`,
		`[1,"x",null,{}]`, `{"a":1}{"b":2}`, `[{"id":1,"data":null,"author":{"x":[1]}}]`, `[`, `{`, ` `, `]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		evs, err := decodeEvents(strings.NewReader(body))
		if err != nil {
			want400(t, err)
			return
		}
		for i := range evs {
			v := &store.ValidationError{}
			store.CheckEvent(&evs[i], "", v)
			if v.Err() != nil {
				t.Fatalf("decoded event %+v fails the store's check: %v", evs[i], v)
			}
		}
	})
}
