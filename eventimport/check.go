package eventimport

import (
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"

	"registryd/store"
)

// Limits of imported events.
const (
	MaxEventTitle    = 1024
	MaxEventRef      = 1024
	MaxEventNoteBody = 1_000_000
)

var (
	importedFromRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	commitIDRE     = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
)

// CheckEvent validates an event to import without reading the database and
// fills the defaults that do not depend on the clock: the class name of
// target_type, target_iid from target_id, the note's id, imported_from.
// Messages go to v under prefix+field ("events[3].action").
func CheckEvent(e *store.Event, prefix string, v *store.ValidationError) {
	add := func(field, msg string) { v.Add(prefix+field, msg) }
	if e.ProjectID < 1 {
		add("project_id", "is missing")
	}
	if e.AuthorID < 1 {
		add("author_id", "is missing")
	}
	switch {
	case e.Action == "":
		add("action", "is missing")
	case !slices.Contains(store.EventActions, e.Action):
		add("action", "does not have a valid value")
	}
	if e.TargetType != "" {
		t, ok := store.NormalizeTargetType(e.TargetType)
		switch {
		case !ok:
			add("target_type", "does not have a valid value")
		case t == store.TargetEpic:
			add("target_type", "Epic events belong to groups; registryd keeps project events only")
		default:
			e.TargetType = t
		}
	}
	if e.TargetID != nil && *e.TargetID < 1 {
		add("target_id", "must be greater than 0")
	}
	if e.TargetIID != nil && *e.TargetIID < 1 {
		add("target_iid", "must be greater than 0")
	}
	if e.TargetIID == nil && e.TargetID != nil {
		iid := *e.TargetID
		e.TargetIID = &iid
	}
	if e.TargetTitle != nil && utf8.RuneCountInString(*e.TargetTitle) > MaxEventTitle {
		add("target_title", "is too long (maximum is "+strconv.Itoa(MaxEventTitle)+" characters)")
	}
	if e.ImportedFrom == "" {
		e.ImportedFrom = "none"
	} else if !importedFromRE.MatchString(e.ImportedFrom) {
		add("imported_from", "is invalid")
	}
	if !e.CreatedAt.IsZero() && (e.CreatedAt.Year() < 1970 || e.CreatedAt.Year() > 9999) {
		add("created_at", "is invalid")
	}

	switch e.Action {
	case store.ActionPushed:
		if e.TargetType != "" || e.TargetID != nil || e.TargetTitle != nil {
			add("target_type", "must be blank for pushed events")
		}
		e.TargetIID = nil
		if e.PushData == nil {
			add("push_data", "is missing")
		} else {
			checkPushData(e.PushData, prefix+"push_data.", v)
		}
	case store.ActionCommented:
		if e.TargetType == "" {
			e.TargetType = store.TargetNote
		} else if !isNoteType(e.TargetType) {
			add("target_type", "must be Note, DiffNote or DiscussionNote for commented events")
		}
		if e.Note == nil {
			add("note", "is missing")
		} else {
			checkNote(e, prefix+"note.", v)
		}
	}
	if e.PushData != nil && e.Action != store.ActionPushed {
		add("push_data", "is only allowed on pushed events")
	}
	if e.Note != nil && e.Action != store.ActionCommented {
		add("note", "is only allowed on commented events")
	}
}

func checkPushData(p *store.PushData, prefix string, v *store.ValidationError) {
	if p.CommitCount < 0 {
		v.Add(prefix+"commit_count", "must be greater than or equal to 0")
	}
	switch p.Action {
	case "pushed", "created", "removed":
	case "":
		v.Add(prefix+"action", "is missing")
	default:
		v.Add(prefix+"action", "does not have a valid value")
	}
	switch p.RefType {
	case "branch", "tag":
	case "":
		v.Add(prefix+"ref_type", "is missing")
	default:
		v.Add(prefix+"ref_type", "does not have a valid value")
	}
	switch {
	case p.Ref == "":
		v.Add(prefix+"ref", "is missing")
	case len(p.Ref) > MaxEventRef:
		v.Add(prefix+"ref", "is too long (maximum is "+strconv.Itoa(MaxEventRef)+" characters)")
	}
	for _, c := range []struct {
		name string
		val  *string
	}{{"commit_from", p.CommitFrom}, {"commit_to", p.CommitTo}} {
		if c.val != nil && !commitIDRE.MatchString(*c.val) {
			v.Add(prefix+c.name, "is not a commit id")
		}
	}
	if p.CommitTitle != nil && utf8.RuneCountInString(*p.CommitTitle) > MaxEventTitle {
		v.Add(prefix+"commit_title", "is too long (maximum is "+strconv.Itoa(MaxEventTitle)+" characters)")
	}
	if p.RefCount != nil && *p.RefCount < 0 {
		v.Add(prefix+"ref_count", "must be greater than or equal to 0")
	}
}

func checkNote(e *store.Event, prefix string, v *store.ValidationError) {
	n := e.Note
	switch {
	case n.Body == "":
		v.Add(prefix+"body", "is missing")
	case len(n.Body) > MaxEventNoteBody:
		v.Add(prefix+"body", "is too long (maximum is "+strconv.Itoa(MaxEventNoteBody)+" bytes)")
	}
	if n.ID < 0 {
		v.Add(prefix+"id", "must be greater than 0")
	}
	if n.ID == 0 && e.TargetID != nil {
		n.ID = *e.TargetID
	}
	if n.NoteableID != nil && *n.NoteableID < 1 {
		v.Add(prefix+"noteable_id", "must be greater than 0")
	}
	if n.NoteableIID != nil && *n.NoteableIID < 1 {
		v.Add(prefix+"noteable_iid", "must be greater than 0")
	}
	if len(n.NoteableType) > 255 {
		v.Add(prefix+"noteable_type", "is too long (maximum is 255 characters)")
	}
}

func isNoteType(t string) bool {
	return t == store.TargetNote || t == store.TargetDiffNote || t == store.TargetDiscussion
}
