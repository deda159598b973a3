package admin

import (
	"errors"
	"net/http"
	"strconv"
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

// eventFilters reads the filters the three lists share.
func eventFilters(in *params) (store.EventQuery, page) {
	var q store.EventQuery
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
	return q, pg
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

// writeEvents answers the page of events q selects; project lists carry
// data too.
func (s *Server) writeEvents(w http.ResponseWriter, r *http.Request, pg page, q store.EventQuery, project bool) error {
	events, total, err := s.st.EventsPage(q)
	if err != nil {
		return err
	}
	views, err := s.eventViews(events)
	if err != nil {
		return err
	}
	if project {
		s.writePage(w, r, pg, total, mapViews(views, func(v eventView) projectEventView {
			return projectEventView{eventView: v}
		}))
		return nil
	}
	s.writePage(w, r, pg, total, views)
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

// authorizedProjects keeps, of ids, the projects the user is a member of
// at any level, directly or through the project's group or one of its
// ancestors: GitLab's User#authorized_projects. Being able to read a
// project (it is public or internal, or the caller is an admin) is not
// enough.
func (s *Server) authorizedProjects(user int64, ids []int64) []int64 {
	out := []int64{}
	for _, id := range ids {
		if s.st.ProjectAccessLevel(id, user) > store.NoAccess {
			out = append(out, id)
		}
	}
	return out
}

// currentUserEvents is GET /events: the caller's own events, or with
// scope=all the events of every project the caller is a member of (GitLab's
// EventsFinder: current_user.authorized_projects, with no admin bypass).
func (s *Server) currentUserEvents(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticateReadUser)
	if err != nil {
		return err
	}
	q, pg := eventFilters(in)
	scope := in.str("scope")
	if err := in.err(); err != nil {
		return err
	}
	switch {
	case scope != nil && *scope == "all":
		ids, err := s.st.EventProjectIDs(0)
		if err != nil {
			return err
		}
		q.Projects = s.authorizedProjects(p.UserID(), ids)
	default:
		if err := s.authorQuery(p, p.UserID(), &q); err != nil {
			return err
		}
	}
	return s.writeEvents(w, r, pg, q, false)
}

// userEvents is GET /users/:id/events, :id being an id or a username.
func (s *Server) userEvents(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticateReadUserOrAnonymous)
	if err != nil {
		return err
	}
	q, pg := eventFilters(in)
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
	p, in, err := authParams(r, s.authenticateReadUserOrAnonymous)
	if err != nil {
		return err
	}
	q, pg := eventFilters(in)
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
