package eventimport

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"registryd/store"
)

// DecodeEvents reads a JSON array or NDJSON stream of events.
func DecodeEvents(body io.Reader) ([]store.Event, error) {
	br := bufio.NewReader(body)
	first, err := firstByte(br)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(br)
	array := first == '['
	switch {
	case array:
		if _, err := dec.Token(); err != nil {
			return nil, eventsJSONError(err, 0)
		}
	case first != '{':
		return nil, formatError("the body must be a JSON array of events or NDJSON, one event object a line")
	}
	var evs []store.Event
	problems := &store.ValidationError{}
	for i := 0; ; i++ {
		if array && !dec.More() {
			break
		}
		var raw map[string]json.RawMessage
		err := dec.Decode(&raw)
		if !array && errors.Is(err, io.EOF) {
			break
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			problems.Add("events["+strconv.Itoa(i)+"]", "must be a JSON object")
			return nil, problems
		}
		if err != nil {
			return nil, eventsJSONError(err, i)
		}
		e := decodeEvent(raw, "events["+strconv.Itoa(i)+"].", problems)
		CheckEvent(&e, "events["+strconv.Itoa(i)+"].", problems)
		if len(problems.Fields) >= store.MaxImportProblems {
			return nil, problems
		}
		if len(problems.Fields) == 0 {
			evs = append(evs, e)
		}
	}
	if array {
		if _, err := dec.Token(); err != nil {
			return nil, eventsJSONError(err, len(evs))
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			if err != nil {
				return nil, eventsJSONError(err, len(evs))
			}
			return nil, formatError("the body has data after the array of events")
		}
	}
	if err := problems.Err(); err != nil {
		return nil, err
	}
	return evs, nil
}

func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, formatError("the body holds no events")
			}
			return 0, eventsJSONError(err, 0)
		}
		if !bytes.ContainsRune([]byte(" \t\r\n"), rune(b)) {
			return b, br.UnreadByte()
		}
	}
}

func eventsJSONError(err error, i int) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return formatError(fmt.Sprintf("events[%d] is not valid JSON (at byte %d: %s)", i, se.Offset, se.Error()))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return formatError(fmt.Sprintf("the body ends inside events[%d]", i))
	}
	return &Error{Reason: "the body could not be read", Err: err}
}

// Keys of an event that are read-only in GitLab's shape: an export from
// GitLab may carry them, and they are ignored (registryd assigns ids and
// derives action_name, author and author_username).
var readOnlyEventKeys = []string{"id", "title", "action_name", "author", "author_username", "data", "wiki_page"}

// actionOfName maps GitLab's action_name back to an action, for events
// exported from GitLab's API, which do not carry action. It is lossy where
// GitLab's mapping is: "opened" was created, updated or reopened.
var actionOfName = map[string]string{
	"pushed to": store.ActionPushed, "pushed new": store.ActionPushed, "deleted": store.ActionPushed,
	"opened": store.ActionCreated, "accepted": store.ActionMerged, "commented on": store.ActionCommented,
	"removed due to membership expiration from": store.ActionExpired, "added": store.ActionCreated,
	"removed": store.ActionDestroyed, "imported": store.ActionCreated,
	"created": store.ActionCreated, "updated": store.ActionUpdated, "closed": store.ActionClosed,
	"reopened": store.ActionReopened, "joined": store.ActionJoined, "left": store.ActionLeft,
	"destroyed": store.ActionDestroyed, "approved": store.ActionApproved,
}

// fields decodes the values of one JSON object, recording a problem per
// field under prefix.
type fields struct {
	prefix string
	v      *store.ValidationError
}

func (f fields) bad(name, msg string) { f.v.Add(f.prefix+name, msg) }

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// decodeValue decodes raw as a T, recording msg under name when it is not
// one; null is nil.
func decodeValue[T any](f fields, name string, raw json.RawMessage, msg string) *T {
	if isNull(raw) {
		return nil
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		f.bad(name, msg)
		return nil
	}
	return &v
}

func (f fields) int64(name string, raw json.RawMessage) *int64 {
	n := decodeValue[json.Number](f, name, raw, "must be an integer")
	if n == nil {
		return nil
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		f.bad(name, "must be an integer")
		return nil
	}
	return &i
}

func (f fields) str(name string, raw json.RawMessage) *string {
	return decodeValue[string](f, name, raw, "must be a string")
}

func (f fields) boolean(name string, raw json.RawMessage) bool {
	return deref(decodeValue[bool](f, name, raw, "must be true or false"))
}

func (f fields) time(name string, raw json.RawMessage) time.Time {
	s := f.str(name, raw)
	if s == nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		f.bad(name, "must be an ISO 8601 time such as 2026-11-21T10:04:05.123Z")
		return time.Time{}
	}
	return t
}

func (f fields) object(name string, raw json.RawMessage) map[string]json.RawMessage {
	return deref(decodeValue[map[string]json.RawMessage](f, name, raw, "must be a JSON object"))
}

// decodeEvent reads one event of an import. Unknown keys are refused, so a
// misspelt field is not silently dropped; push_data and note ignore keys
// they do not know, since GitLab's exports carry many.
func decodeEvent(raw map[string]json.RawMessage, prefix string, v *store.ValidationError) store.Event {
	f := fields{prefix: prefix, v: v}
	var e store.Event
	var actionName *string
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys) // problems in a stable order
	for _, k := range keys {
		val := raw[k]
		switch k {
		case "project_id":
			e.ProjectID = deref(f.int64(k, val))
		case "author_id":
			e.AuthorID = deref(f.int64(k, val))
		case "action":
			e.Action = deref(f.str(k, val))
		case "target_type":
			e.TargetType = deref(f.str(k, val))
		case "target_id":
			e.TargetID = f.int64(k, val)
		case "target_iid":
			e.TargetIID = f.int64(k, val)
		case "target_title":
			e.TargetTitle = f.str(k, val)
		case "created_at":
			e.CreatedAt = f.time(k, val)
		case "imported":
			e.Imported = f.boolean(k, val)
		case "imported_from":
			e.ImportedFrom = deref(f.str(k, val))
		case "push_data":
			if m := f.object(k, val); m != nil {
				e.PushData = decodePushData(m, fields{prefix: prefix + "push_data.", v: v})
			}
		case "note":
			if m := f.object(k, val); m != nil {
				e.Note = decodeNote(m, fields{prefix: prefix + "note.", v: v})
			}
		case "action_name":
			actionName = f.str(k, val)
		default:
			if !slices.Contains(readOnlyEventKeys, k) {
				f.bad(k, "is not a known field")
			}
		}
	}
	if e.Action == "" && actionName != nil {
		if a, ok := actionOfName[*actionName]; ok {
			e.Action = a
		} else {
			f.bad("action_name", "does not have a valid value")
		}
	}
	return e
}

func decodePushData(m map[string]json.RawMessage, f fields) *store.PushData {
	p := &store.PushData{}
	for k, val := range m {
		switch k {
		case "commit_count":
			p.CommitCount = deref(f.int64(k, val))
		case "action":
			p.Action = deref(f.str(k, val))
		case "ref_type":
			p.RefType = deref(f.str(k, val))
		case "commit_from":
			p.CommitFrom = f.str(k, val)
		case "commit_to":
			p.CommitTo = f.str(k, val)
		case "ref":
			p.Ref = deref(f.str(k, val))
		case "commit_title":
			p.CommitTitle = f.str(k, val)
		case "ref_count":
			p.RefCount = f.int64(k, val)
		}
	}
	return p
}

func decodeNote(m map[string]json.RawMessage, f fields) *store.EventNote {
	n := &store.EventNote{}
	for k, val := range m {
		switch k {
		case "id":
			n.ID = deref(f.int64(k, val))
		case "body":
			n.Body = deref(f.str(k, val))
		case "attachment":
			n.Attachment = f.str(k, val)
		case "system":
			n.System = f.boolean(k, val)
		case "noteable_id":
			n.NoteableID = f.int64(k, val)
		case "noteable_type":
			n.NoteableType = deref(f.str(k, val))
		case "noteable_iid":
			n.NoteableIID = f.int64(k, val)
		case "created_at":
			n.CreatedAt = f.time(k, val)
		}
	}
	return n
}
