package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesEvents() {
	s.handle(http.MethodPost, "/api/v4/admin/events", s.importEvents)
	s.handle(http.MethodGet, "/api/v4/events", s.currentUserEvents)
	s.handle(http.MethodGet, "/api/v4/users/{id}/events", s.userEvents)
	s.handle(http.MethodGet, "/api/v4/projects/{id}/events", s.projectEvents)
}

// --- reading ---

type eventView struct {
	ID             int64         `json:"id"`
	Title          *string       `json:"title"`
	ProjectID      int64         `json:"project_id"`
	ActionName     string        `json:"action_name"`
	TargetID       *int64        `json:"target_id"`
	TargetIID      *int64        `json:"target_iid"`
	TargetType     *string       `json:"target_type"`
	AuthorID       int64         `json:"author_id"`
	TargetTitle    *string       `json:"target_title"`
	CreatedAt      jsonTime      `json:"created_at"`
	Note           *noteView     `json:"note,omitempty"`
	Author         *userSummary  `json:"author,omitempty"`
	Imported       bool          `json:"imported"`
	ImportedFrom   string        `json:"imported_from"`
	PushData       *pushDataView `json:"push_data,omitempty"`
	AuthorUsername string        `json:"author_username"`
}

// projectEventView is the shape of project event lists, which also carry
// data (always null).
type projectEventView struct {
	eventView
	Data *struct{} `json:"data"`
}

type noteView struct {
	ID           int64       `json:"id"`
	Body         string      `json:"body"`
	Attachment   *string     `json:"attachment"`
	Author       userSummary `json:"author"`
	CreatedAt    jsonTime    `json:"created_at"`
	System       bool        `json:"system"`
	NoteableID   *int64      `json:"noteable_id"`
	NoteableType *string     `json:"noteable_type"`
	NoteableIID  *int64      `json:"noteable_iid"`
}

type pushDataView struct {
	CommitCount int64   `json:"commit_count"`
	Action      string  `json:"action"`
	RefType     string  `json:"ref_type"`
	CommitFrom  *string `json:"commit_from"`
	CommitTo    *string `json:"commit_to"`
	Ref         string  `json:"ref"`
	CommitTitle *string `json:"commit_title"`
	RefCount    *int64  `json:"ref_count"`
}

// actionName is GitLab's action_name for an event (Event#action_name).
func actionName(e store.Event) string {
	switch {
	case e.Action == store.ActionPushed:
		if e.PushData != nil {
			switch e.PushData.Action {
			case "created":
				return "pushed new"
			case "removed":
				return "deleted"
			}
		}
		return "pushed to"
	case e.TargetType == store.TargetDesign:
		switch e.Action {
		case store.ActionCreated:
			return "added"
		case store.ActionUpdated:
			return "updated"
		case store.ActionDestroyed:
			return "removed"
		}
	}
	switch e.Action {
	case store.ActionClosed, store.ActionJoined, store.ActionLeft, store.ActionDestroyed, store.ActionApproved:
		return e.Action
	case store.ActionMerged:
		return "accepted"
	case store.ActionExpired:
		return "removed due to membership expiration from"
	case store.ActionCommented:
		return "commented on"
	case store.ActionCreated:
		switch {
		case e.TargetType == store.TargetWiki:
			return "created"
		case e.TargetType == "" && e.Imported:
			return "imported"
		case e.TargetType == "":
			return "created"
		}
	case store.ActionUpdated:
		if e.TargetType == store.TargetWiki {
			return "updated"
		}
	}
	return "opened"
}

// eventViews renders events, reading each author once.
func (s *Server) eventViews(events []store.Event) ([]eventView, error) {
	authors := map[int64]*userSummary{}
	out := make([]eventView, 0, len(events))
	for _, e := range events {
		a, ok := authors[e.AuthorID]
		if !ok {
			u, err := s.st.User(e.AuthorID)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return nil, err
			default:
				sum := s.userSummary(u)
				a = &sum
			}
			authors[e.AuthorID] = a
		}
		v := eventView{ID: e.ID, ProjectID: e.ProjectID, ActionName: actionName(e), TargetID: e.TargetID,
			TargetIID: e.TargetIID, TargetType: optString(e.TargetType), AuthorID: e.AuthorID,
			TargetTitle: e.TargetTitle, CreatedAt: jsonTime(e.CreatedAt), Author: a, Imported: e.Imported,
			ImportedFrom: e.ImportedFrom}
		if v.ImportedFrom == "" {
			v.ImportedFrom = "none"
		}
		if a != nil {
			v.AuthorUsername = a.Username
		}
		if n := e.Note; n != nil {
			v.Note = &noteView{ID: n.ID, Body: n.Body, Attachment: n.Attachment, CreatedAt: jsonTime(n.CreatedAt),
				System: n.System, NoteableID: n.NoteableID, NoteableType: optString(n.NoteableType), NoteableIID: n.NoteableIID}
			if a != nil {
				v.Note.Author = *a
			}
		}
		if p := e.PushData; p != nil {
			v.PushData = &pushDataView{CommitCount: p.CommitCount, Action: p.Action, RefType: p.RefType,
				CommitFrom: p.CommitFrom, CommitTo: p.CommitTo, Ref: p.Ref, CommitTitle: p.CommitTitle, RefCount: p.RefCount}
		}
		out = append(out, v)
	}
	return out, nil
}

// eventFilters reads the filters the three lists share into q.
func eventFilters(in *params, q *store.EventQuery) page {
	pg := in.page()
	if a := in.oneOf("action", store.EventActions...); a != nil {
		q.Action = *a
	}
	if t := in.str("target_type"); t != nil {
		if class, ok := store.EventTargetFilters[*t]; ok {
			q.TargetType = class
		} else {
			in.fail("target_type does not have a valid value")
		}
	}
	// Both bounds leave out the whole named day, as GitLab's do: before=D
	// keeps what happened before D began, after=D what happened after D ended.
	if d := in.date("before"); d != nil {
		q.CreatedBefore = startOfDay(*d)
	}
	if d := in.date("after"); d != nil {
		q.CreatedFrom = startOfDay(*d).AddDate(0, 0, 1)
	}
	if srt := in.oneOf("sort", "asc", "desc"); srt != nil {
		q.Asc = *srt == "asc"
	}
	q.Offset, q.Limit = pg.Offset(), pg.PerPage
	return pg
}

func startOfDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// readableProjects splits ids into the projects the caller may read (public
// ones for anyone, internal ones for signed-in users, private ones for
// members, all for admins) and the others.
func (s *Server) readableProjects(p auth.Principal, ids []int64) (readable []int64, hidden map[int64]bool, err error) {
	hidden = map[int64]bool{}
	readable = []int64{}
	for _, id := range ids {
		pr, err := s.st.Project(id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			hidden[id] = true
			continue
		case err != nil:
			return nil, nil, err
		}
		if p.IsAdmin() || s.auth.CanSeeProject(p, pr) {
			readable = append(readable, id)
		} else {
			hidden[id] = true
		}
	}
	return readable, hidden, nil
}

// eventReader authenticates a reader of events: a token must carry
// read_user, read_api or api; anonymous callers pass when allowAnonymous.
func (s *Server) eventReader(r *http.Request, allowAnonymous bool) (auth.Principal, error) {
	p, err := s.principal(r)
	if err != nil {
		return p, err
	}
	if !p.Authenticated() {
		if allowAnonymous {
			return p, nil
		}
		return p, errUnauthorized
	}
	if !p.HasScope(readUserScopes...) {
		return p, insufficientScope(strings.Join(readUserScopes, " "))
	}
	return p, nil
}

func (s *Server) writeEvents(w http.ResponseWriter, r *http.Request, pg page, q store.EventQuery, project bool) error {
	events, total, err := s.st.EventsPage(q)
	if err != nil {
		return err
	}
	views, err := s.eventViews(events)
	if err != nil {
		return err
	}
	s.setPageHeaders(w, r, pg, total)
	if !project {
		writeJSON(w, http.StatusOK, views)
		return nil
	}
	out := make([]projectEventView, len(views))
	for i, v := range views {
		out[i] = projectEventView{eventView: v}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// authorQuery fills q for the events by author that the caller may read.
func (s *Server) authorQuery(p auth.Principal, author int64, q *store.EventQuery) error {
	q.AuthorID = author
	if p.IsAdmin() {
		return nil
	}
	ids, err := s.st.EventProjectIDs(author)
	if err != nil {
		return err
	}
	_, q.HiddenProjects, err = s.readableProjects(p, ids)
	return err
}

// currentUserEvents is GET /events: the caller's own events, or with
// scope=all the events of every project the caller may read.
func (s *Server) currentUserEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := s.eventReader(r, false)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	var q store.EventQuery
	pg := eventFilters(in, &q)
	scope := in.str("scope")
	if err := in.err(); err != nil {
		return err
	}
	switch {
	case scope != nil && *scope == "all" && p.IsAdmin():
		q.All = true
	case scope != nil && *scope == "all":
		ids, err := s.st.EventProjectIDs(0)
		if err != nil {
			return err
		}
		if q.Projects, _, err = s.readableProjects(p, ids); err != nil {
			return err
		}
	default:
		if err := s.authorQuery(p, p.UserID(), &q); err != nil {
			return err
		}
	}
	return s.writeEvents(w, r, pg, q, false)
}

// userEvents is GET /users/:id/events, :id being an id or a username.
func (s *Server) userEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := s.eventReader(r, true)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	var q store.EventQuery
	pg := eventFilters(in, &q)
	if err := in.err(); err != nil {
		return err
	}
	ref := r.PathValue("id")
	var u store.User
	if id, perr := strconv.ParseInt(ref, 10, 64); perr == nil {
		u, err = s.st.User(id)
	} else {
		u, err = s.st.UserByUsername(ref)
	}
	if err != nil {
		return err
	}
	if err := s.authorQuery(p, u.ID, &q); err != nil {
		return err
	}
	return s.writeEvents(w, r, pg, q, false)
}

// projectEvents is GET /projects/:id/events.
func (s *Server) projectEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := s.eventReader(r, true)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	var q store.EventQuery
	pg := eventFilters(in, &q)
	if err := in.err(); err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	q.ProjectID = pr.ID
	return s.writeEvents(w, r, pg, q, true)
}

// --- importing ---

type importView struct {
	Count   int    `json:"count"`
	FirstID *int64 `json:"first_id"`
	LastID  *int64 `json:"last_id"`
}

// importEvents is POST /admin/events: a JSON array of events, or NDJSON
// (one event object a line), validated whole and stored in one transaction.
// The body is decoded one event at a time; only the decoded events are kept.
func (s *Server) importEvents(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	evs, err := decodeEvents(r.Body)
	if err != nil {
		return err
	}
	res, err := s.st.ImportEvents(evs)
	if err != nil {
		return err
	}
	s.log.Info("events imported", "req_id", requestID(r), "count", res.Count)
	v := importView{Count: res.Count}
	if res.Count > 0 {
		v.FirstID, v.LastID = &res.FirstID, &res.LastID
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// decodeEvents reads a JSON array or NDJSON stream of events.
func decodeEvents(body io.Reader) ([]store.Event, error) {
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
		return nil, badRequest("the body must be a JSON array of events or NDJSON, one event object a line")
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
		store.CheckEvent(&e, "events["+strconv.Itoa(i)+"].", problems)
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
			return nil, badRequest("the body has data after the array of events")
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
				return 0, badRequest("the body holds no events")
			}
			return 0, eventsJSONError(err, 0)
		}
		if !bytes.ContainsRune([]byte(" \t\r\n"), rune(b)) {
			return b, br.UnreadByte()
		}
	}
}

func eventsJSONError(err error, i int) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest(fmt.Sprintf("events[%d] is not valid JSON (at byte %d: %s)", i, se.Offset, se.Error()))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badRequest(fmt.Sprintf("the body ends inside events[%d]", i))
	}
	return badRequest("the body could not be read")
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

func (f fields) int64(name string, raw json.RawMessage) *int64 {
	if isNull(raw) {
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		f.bad(name, "must be an integer")
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
	if isNull(raw) {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		f.bad(name, "must be a string")
		return nil
	}
	return &s
}

func (f fields) boolean(name string, raw json.RawMessage) bool {
	var b bool
	if !isNull(raw) && json.Unmarshal(raw, &b) != nil {
		f.bad(name, "must be true or false")
	}
	return b
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
	if isNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		f.bad(name, "must be a JSON object")
		return nil
	}
	return m
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
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
