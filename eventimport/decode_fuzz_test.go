package eventimport

import (
	"errors"
	"strings"
	"testing"

	"registryd/store"
)

// FuzzDecodeEvents: whatever the body, an import decodes to events that
// pass CheckEvent again, or is refused (a 400 on the listener); it never
// panics.
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
		evs, err := DecodeEvents(strings.NewReader(body))
		if err != nil {
			var ae *Error
			var ve *store.ValidationError
			if !errors.As(err, &ae) && !errors.As(err, &ve) {
				t.Fatalf("err = %v (%T) is not a refusal", err, err)
			}
			return
		}
		for i := range evs {
			v := &store.ValidationError{}
			CheckEvent(&evs[i], "", v)
			if v.Err() != nil {
				t.Fatalf("decoded event %+v fails CheckEvent: %v", evs[i], v)
			}
		}
	})
}
