package eventimport

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"registryd/store"
)

func TestDecodeEvents(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // "action target_type target_iid" of each event
	}{
		{"array", `[{"project_id":1,"author_id":2,"action":"closed","target_type":"issue","target_id":5}]`, []string{"closed Issue 5"}},
		{"NDJSON with blank lines", `{"project_id":1,"author_id":2,"action":"merged","target_type":"merge_request","target_id":7}` + "\n\n" +
			`{"project_id":1,"author_id":2,"action":"commented","target_id":8,"note":{"body":"LGTM","unknown":1}}` + "\n",
			[]string{"merged MergeRequest 7", "commented Note 8"}},
		{"a GitLab export: action from action_name, read-only keys ignored",
			`[{"id":4242,"title":null,"project_id":1,"author_id":2,"action_name":"accepted","target_type":"MergeRequest","target_id":9,"author":{"id":1},"author_username":"x","data":null}]`,
			[]string{"merged MergeRequest 9"}},
		{"empty array", ` [ ] `, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := DecodeEvents(strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, fmt.Sprintf("%s %s %d", e.Action, e.TargetType, *e.TargetIID))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// The refusals of a body: the reason of an *Error, or the problems of a
// *store.ValidationError; the listener answers them as 400s.
func TestDecodeEventsRefusals(t *testing.T) {
	ev := `{"project_id":1,"author_id":2,"action":"closed"}`
	tests := []struct {
		name, body string
		reason     string   // an *Error's
		problems   []string // a *store.ValidationError's, "field: message"
	}{
		{name: "empty body", body: "  \n", reason: "the body holds no events"},
		{name: "neither array nor object", body: `"events"`,
			reason: "the body must be a JSON array of events or NDJSON, one event object a line"},
		{name: "bad JSON in the third line", body: ev + "\n" + ev + "\n{oops}\n",
			reason: "events[2] is not valid JSON (at byte 100: invalid character 'o' looking for beginning of object key string)"},
		{name: "cut short", body: "[" + ev + `,{"project_id":`, reason: "the body ends inside events[1]"},
		{name: "data after the array", body: "[" + ev + "] {}", reason: "the body has data after the array of events"},
		{name: "element not an object", body: "[" + ev + `,42]`, problems: []string{"events[1]: must be a JSON object"}},
		{name: "unknown field", body: `[{"project_id":1,"author_id":2,"action":"closed","project":"x"}]`,
			problems: []string{"events[0].project: is not a known field"}},
		{name: "wrong types", body: `[{"project_id":1,"author_id":2,"action":"closed","target_id":"seven","imported":"yes","created_at":"yesterday"}]`,
			problems: []string{"events[0].created_at: must be an ISO 8601 time such as 2026-11-21T10:04:05.123Z",
				"events[0].imported: must be true or false", "events[0].target_id: must be an integer"}},
		{name: "unknown action_name", body: `[{"project_id":1,"author_id":2,"action_name":"deployed to"}]`,
			problems: []string{"events[0].action: is missing", "events[0].action_name: does not have a valid value"}},
		{name: "checked as decoded", body: ev + "\n" + `{"project_id":1,"author_id":2,"action":"pushed"}`,
			problems: []string{"events[1].push_data: is missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeEvents(strings.NewReader(tt.body))
			var ae *Error
			var ve *store.ValidationError
			switch {
			case tt.reason != "":
				if !errors.As(err, &ae) || ae.Reason != tt.reason {
					t.Fatalf("err = %v, want the reason %q", err, tt.reason)
				}
			case !errors.As(err, &ve):
				t.Fatalf("err = %v (%T), want a validation error", err, err)
			default:
				if got := problems(ve); !slices.Equal(got, tt.problems) {
					t.Fatalf("problems %q, want %q", got, tt.problems)
				}
			}
		})
	}
}

// A failure of the body's reader (the listener's limit, for one) stays
// reachable, so that the listener can answer 413.
func TestDecodeEventsReaderFails(t *testing.T) {
	errLimit := errors.New("over the limit")
	body := io.MultiReader(strings.NewReader(`[{"project_id":1,"author_id":2,"action":"closed"},{"proj`), iotest.ErrReader(errLimit))
	_, err := DecodeEvents(body)
	var ae *Error
	if !errors.Is(err, errLimit) || !errors.As(err, &ae) || ae.Reason != "the body could not be read" {
		t.Fatalf("err = %v, want the reader's error inside an *Error", err)
	}
}
