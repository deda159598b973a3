package eventimport

import (
	"slices"
	"strings"
	"testing"

	"registryd/store"
)

func ptr[T any](v T) *T { return &v }

// problems lists v's messages as "field: message".
func problems(v *store.ValidationError) []string {
	var out []string
	for f, msgs := range v.Fields {
		for _, m := range msgs {
			out = append(out, f+": "+m)
		}
	}
	slices.Sort(out)
	return out
}

// CheckEvent's refusals, each with the field and message an import answers.
func TestCheckEventRefusals(t *testing.T) {
	good := store.Event{ProjectID: 1, AuthorID: 2, Action: store.ActionCreated, TargetType: store.TargetIssue, TargetID: ptr(int64(1))}
	push := &store.PushData{CommitCount: 1, Action: "pushed", RefType: "branch", Ref: "main"}
	note := &store.EventNote{Body: "hi"}
	with := func(f func(e *store.Event)) store.Event {
		e := good
		f(&e)
		return e
	}
	pushed := func(p *store.PushData) store.Event {
		return store.Event{ProjectID: 1, AuthorID: 2, Action: store.ActionPushed, PushData: p}
	}
	tests := []struct {
		name       string
		ev         store.Event
		field, msg string
	}{
		{"no project", with(func(e *store.Event) { e.ProjectID = 0 }), "project_id", "is missing"},
		{"no author", with(func(e *store.Event) { e.AuthorID = 0 }), "author_id", "is missing"},
		{"no action", with(func(e *store.Event) { e.Action = "" }), "action", "is missing"},
		{"unknown action", with(func(e *store.Event) { e.Action = "deployed" }), "action", "does not have a valid value"},
		{"unknown target type", with(func(e *store.Event) { e.TargetType = "Pipeline" }), "target_type", "does not have a valid value"},
		{"epic", with(func(e *store.Event) { e.TargetType = "epic" }), "target_type", "Epic events belong to groups; registryd keeps project events only"},
		{"zero target id", with(func(e *store.Event) { e.TargetID = ptr(int64(0)) }), "target_id", "must be greater than 0"},
		{"zero target iid", with(func(e *store.Event) { e.TargetIID = ptr(int64(0)) }), "target_iid", "must be greater than 0"},
		{"long title", with(func(e *store.Event) { e.TargetTitle = ptr(strings.Repeat("t", MaxEventTitle+1)) }), "target_title", "is too long (maximum is 1024 characters)"},
		{"bad imported_from", with(func(e *store.Event) { e.ImportedFrom = "Git Hub" }), "imported_from", "is invalid"},
		{"created before 1970", with(func(e *store.Event) { e.CreatedAt = e.CreatedAt.AddDate(1, 0, 0) }), "created_at", "is invalid"},
		{"push without push_data", pushed(nil), "push_data", "is missing"},
		{"push with a target", with(func(e *store.Event) { e.Action = store.ActionPushed; e.PushData = push }), "target_type", "must be blank for pushed events"},
		{"push_data on another action", with(func(e *store.Event) { e.PushData = push }), "push_data", "is only allowed on pushed events"},
		{"negative commit count", pushed(&store.PushData{CommitCount: -1, Action: "pushed", RefType: "tag", Ref: "v1"}), "push_data.commit_count", "must be greater than or equal to 0"},
		{"no push action", pushed(&store.PushData{RefType: "tag", Ref: "v1"}), "push_data.action", "is missing"},
		{"bad push action", pushed(&store.PushData{Action: "force", RefType: "tag", Ref: "v1"}), "push_data.action", "does not have a valid value"},
		{"no ref type", pushed(&store.PushData{Action: "pushed", Ref: "x"}), "push_data.ref_type", "is missing"},
		{"bad ref type", pushed(&store.PushData{Action: "pushed", RefType: "commit", Ref: "x"}), "push_data.ref_type", "does not have a valid value"},
		{"no ref", pushed(&store.PushData{Action: "pushed", RefType: "tag"}), "push_data.ref", "is missing"},
		{"long ref", pushed(&store.PushData{Action: "pushed", RefType: "tag", Ref: strings.Repeat("r", MaxEventRef+1)}), "push_data.ref", "is too long (maximum is 1024 characters)"},
		{"bad commit id", pushed(&store.PushData{Action: "pushed", RefType: "tag", Ref: "v1", CommitTo: ptr("HEAD")}), "push_data.commit_to", "is not a commit id"},
		{"bad commit_from", pushed(&store.PushData{Action: "pushed", RefType: "tag", Ref: "v1", CommitFrom: ptr("abc")}), "push_data.commit_from", "is not a commit id"},
		{"long commit title", pushed(&store.PushData{Action: "pushed", RefType: "tag", Ref: "v1", CommitTitle: ptr(strings.Repeat("t", MaxEventTitle+1))}), "push_data.commit_title", "is too long (maximum is 1024 characters)"},
		{"negative ref count", pushed(&store.PushData{Action: "pushed", RefType: "tag", Ref: "v1", RefCount: ptr(int64(-1))}), "push_data.ref_count", "must be greater than or equal to 0"},
		{"comment without note", with(func(e *store.Event) { e.Action = store.ActionCommented; e.TargetType = "" }), "note", "is missing"},
		{"comment on an issue", with(func(e *store.Event) { e.Action = store.ActionCommented; e.Note = note }), "target_type", "must be Note, DiffNote or DiscussionNote for commented events"},
		{"note without body", with(func(e *store.Event) {
			e.Action, e.TargetType, e.Note = store.ActionCommented, store.TargetDiffNote, &store.EventNote{}
		}), "note.body", "is missing"},
		{"long note body", with(func(e *store.Event) {
			e.Action, e.TargetType, e.Note = store.ActionCommented, store.TargetNote, &store.EventNote{Body: strings.Repeat("b", MaxEventNoteBody+1)}
		}), "note.body", "is too long (maximum is 1000000 bytes)"},
		{"negative note id", with(func(e *store.Event) {
			e.Action, e.TargetType, e.Note = store.ActionCommented, store.TargetNote, &store.EventNote{Body: "b", ID: -1}
		}), "note.id", "must be greater than 0"},
		{"zero noteable iid", with(func(e *store.Event) {
			e.Action, e.TargetType, e.Note = store.ActionCommented, store.TargetNote, &store.EventNote{Body: "b", NoteableIID: ptr(int64(0))}
		}), "note.noteable_iid", "must be greater than 0"},
		{"long noteable type", with(func(e *store.Event) {
			e.Action, e.TargetType, e.Note = store.ActionCommented, store.TargetNote, &store.EventNote{Body: "b", NoteableType: strings.Repeat("n", 256)}
		}), "note.noteable_type", "is too long (maximum is 255 characters)"},
		{"note on another action", with(func(e *store.Event) { e.Note = note }), "note", "is only allowed on commented events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &store.ValidationError{}
			CheckEvent(&tt.ev, "events[2].", v)
			want := "events[2]." + tt.field + ": " + tt.msg
			if got := problems(v); !slices.Contains(got, want) {
				t.Fatalf("problems %q, want %q", got, want)
			}
		})
	}
	v := &store.ValidationError{}
	CheckEvent(&good, "", v)
	if v.Err() != nil {
		t.Fatalf("a good event: %v", v)
	}
}

// The defaults that do not depend on the clock; the store fills the others.
func TestCheckEventDefaults(t *testing.T) {
	tests := []struct {
		name  string
		ev    store.Event
		check func(e store.Event) bool
	}{
		{"a comment is on a Note, its id the target's",
			store.Event{ProjectID: 1, AuthorID: 1, Action: store.ActionCommented, TargetID: ptr(int64(77)), Note: &store.EventNote{Body: "LGTM"}},
			func(e store.Event) bool {
				return e.TargetType == store.TargetNote && *e.TargetIID == 77 && e.Note.ID == 77 && e.ImportedFrom == "none"
			}},
		{"a filter name becomes the class name, target_iid the target's id",
			store.Event{ProjectID: 1, AuthorID: 1, Action: store.ActionClosed, TargetType: "issue", TargetID: ptr(int64(9))},
			func(e store.Event) bool { return e.TargetType == store.TargetIssue && *e.TargetIID == 9 }},
		{"a given target_iid stays",
			store.Event{ProjectID: 1, AuthorID: 1, Action: store.ActionMerged, TargetType: "merge_request", TargetID: ptr(int64(9)), TargetIID: ptr(int64(3))},
			func(e store.Event) bool { return e.TargetType == store.TargetMergeRequest && *e.TargetIID == 3 }},
		{"a push has no target_iid; imported_from stays",
			store.Event{ProjectID: 1, AuthorID: 1, Action: store.ActionPushed, ImportedFrom: "github",
				PushData: &store.PushData{Action: "pushed", RefType: "branch", Ref: "main"}},
			func(e store.Event) bool { return e.TargetIID == nil && e.ImportedFrom == "github" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &store.ValidationError{}
			CheckEvent(&tt.ev, "", v)
			if v.Err() != nil {
				t.Fatal(v)
			}
			if !tt.check(tt.ev) {
				t.Fatalf("event = %+v", tt.ev)
			}
		})
	}
}
