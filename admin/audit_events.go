package admin

import (
	"errors"
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesAuditEvents() {
	s.handle(http.MethodGet, "/api/v4/audit_events", s.listAuditEvents)
	s.handle(http.MethodGet, "/api/v4/audit_events/{id}", s.getAuditEvent)
	s.handle(http.MethodGet, "/api/v4/groups/{id}/audit_events", s.listGroupAuditEvents)
	s.handle(http.MethodGet, "/api/v4/groups/{id}/audit_events/{audit_event_id}", s.getGroupAuditEvent)
}

// auditEventView is GitLab's audit event entity (EE::API::Entities::AuditEvent).
type auditEventView struct {
	ID         int64            `json:"id"`
	AuthorID   int64            `json:"author_id"`
	EntityID   int64            `json:"entity_id"`
	EntityType string           `json:"entity_type"`
	EventName  string           `json:"event_name"`
	Details    auditDetailsView `json:"details"`
	CreatedAt  jsonTime         `json:"created_at"`
}

// auditDetailsView holds the details GitLab's audit events carry that
// registryd knows; a detail an event has not is null. An aggregate event
// (several refusals in one) adds its own keys, which other events leave
// out, as GitLab's details differ by event: its count, the times of its
// first and last occurrence, and what the first and the last concerned.
type auditDetailsView struct {
	EventName     string  `json:"event_name"`
	CustomMessage *string `json:"custom_message"`
	AuthorName    *string `json:"author_name"`
	AuthorEmail   *string `json:"author_email"`
	AuthorClass   *string `json:"author_class"`
	TargetID      *int64  `json:"target_id"`
	TargetType    *string `json:"target_type"`
	TargetDetails *string `json:"target_details"`
	IPAddress     *string `json:"ip_address"`
	EntityPath    *string `json:"entity_path"`

	Count              int64     `json:"count,omitempty"`
	FirstAt            *jsonTime `json:"first_at,omitempty"`
	LastAt             *jsonTime `json:"last_at,omitempty"`
	FirstTargetDetails *string   `json:"first_target_details,omitempty"`
	LastTargetDetails  *string   `json:"last_target_details,omitempty"`
}

// auditEnabled is the licence gate: audit events are a Premium feature in
// GitLab. Off, the endpoints answer 404 before authentication, as every
// gated feature of registryd does.
func (s *Server) auditEnabled() bool { return s.auth.Plan().AtLeast(auth.PlanPremium) }

// auditViews renders events. An author's email is shown, as a user's email
// is everywhere in registryd, only to admins and to the author themself.
func (s *Server) auditViews(p auth.Principal, events []store.AuditEvent) ([]auditEventView, error) {
	emails := map[int64]*string{}
	out := make([]auditEventView, 0, len(events))
	for _, e := range events {
		v := auditEventView{ID: e.ID, AuthorID: e.AuthorID, EntityID: e.EntityID, EntityType: e.EntityType,
			EventName: e.EventName, CreatedAt: jsonTime(e.CreatedAt), Details: auditDetailsView{
				EventName: e.EventName, CustomMessage: optString(e.Message), AuthorName: optString(e.AuthorName),
				AuthorClass: optString(e.AuthorClass), TargetType: optString(e.TargetType),
				TargetDetails: optString(e.TargetDetails), IPAddress: optString(e.IPAddress),
				EntityPath: optString(e.EntityPath)}}
		if e.TargetID != 0 {
			id := e.TargetID
			v.Details.TargetID = &id
		}
		if e.Count > 0 {
			first, last := jsonTime(e.FirstAt), jsonTime(e.CreatedAt)
			v.Details.Count, v.Details.FirstAt, v.Details.LastAt = e.Count, &first, &last
			v.Details.FirstTargetDetails, v.Details.LastTargetDetails = optString(e.FirstDetails), optString(e.LastDetails)
		}
		if e.AuthorID > 0 && (p.IsAdmin() || p.UserID() == e.AuthorID) {
			email, seen := emails[e.AuthorID]
			if !seen {
				u, err := s.st.User(e.AuthorID)
				switch {
				case errors.Is(err, store.ErrNotFound):
				case err != nil:
					return nil, err
				default:
					email = optString(u.Email)
				}
				emails[e.AuthorID] = email
			}
			v.Details.AuthorEmail = email
		}
		out = append(out, v)
	}
	return out, nil
}

// auditFilters reads created_after and created_before and the page.
func auditFilters(in *params) (store.AuditQuery, page) {
	var q store.AuditQuery
	pg := in.page()
	if t := in.dateTime("created_after"); t != nil {
		q.After = *t
	}
	if t := in.dateTime("created_before"); t != nil {
		q.Before = *t
	}
	q.Offset, q.Limit = pg.Offset(), pg.PerPage
	return q, pg
}

func (s *Server) writeAuditPage(w http.ResponseWriter, r *http.Request, p auth.Principal, pg page, q store.AuditQuery) error {
	events, total, err := s.st.AuditEventsPage(q)
	if err != nil {
		return err
	}
	views, err := s.auditViews(p, events)
	if err != nil {
		return err
	}
	s.writePage(w, r, pg, total, views)
	return nil
}

func (s *Server) writeAuditEvent(w http.ResponseWriter, p auth.Principal, e store.AuditEvent) error {
	views, err := s.auditViews(p, []store.AuditEvent{e})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, views[0])
	return nil
}

// requireAuditAdmin is the gate and the admin check of the instance endpoints.
func (s *Server) requireAuditAdmin(r *http.Request) (auth.Principal, error) {
	if !s.auditEnabled() {
		return auth.Principal{}, errNotFound
	}
	return s.requireAdmin(r)
}

// listAuditEvents is GET /audit_events: every audit event, for admins.
func (s *Server) listAuditEvents(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.requireAuditAdmin)
	if err != nil {
		return err
	}
	q, pg := auditFilters(in)
	if t := in.oneOf("entity_type", store.AuditEntityTypes...); t != nil {
		q.EntityType = *t
	}
	if id := in.integer("entity_id"); id != nil {
		if !in.has("entity_type") {
			in.fail("entity_type is missing")
		}
		q.EntityID = int64(*id)
	}
	if err := in.err(); err != nil {
		return err
	}
	return s.writeAuditPage(w, r, p, pg, q)
}

// getAuditEvent is GET /audit_events/:id.
func (s *Server) getAuditEvent(w http.ResponseWriter, r *http.Request) error {
	p, err := s.requireAuditAdmin(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	e, err := s.st.AuditEvent(id)
	if err != nil {
		return err
	}
	return s.writeAuditEvent(w, p, e)
}

// groupAuditScope runs the checks of the group endpoints in GitLab's order
// after authentication: the group (404 when missing or invisible), then
// read_group_audit_events (developer and above, else 403). Owners and
// admins read every event of the group; developers and maintainers only
// those they authored (GitLab's filter_by_author).
func (s *Server) groupAuditScope(r *http.Request) (auth.Principal, store.AuditQuery, error) {
	var q store.AuditQuery
	if !s.auditEnabled() {
		return auth.Principal{}, q, errNotFound
	}
	p, err := s.authenticate(r)
	if err != nil {
		return p, q, err
	}
	g, err := s.visibleGroup(r, p)
	if err != nil {
		return p, q, err
	}
	level := s.auth.GroupLevel(p, g.ID)
	if level < store.Developer {
		return p, q, errForbidden
	}
	q.EntityType, q.EntityID = store.AuditEntityGroup, g.ID
	if level < store.Owner {
		q.AuthorID = p.UserID()
	}
	return p, q, nil
}

// listGroupAuditEvents is GET /groups/:id/audit_events.
func (s *Server) listGroupAuditEvents(w http.ResponseWriter, r *http.Request) error {
	p, scope, err := s.groupAuditScope(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	q, pg := auditFilters(in)
	if err := in.err(); err != nil {
		return err
	}
	q.EntityType, q.EntityID, q.AuthorID = scope.EntityType, scope.EntityID, scope.AuthorID
	return s.writeAuditPage(w, r, p, pg, q)
}

// getGroupAuditEvent is GET /groups/:id/audit_events/:audit_event_id; an
// event of another scope, or (below owner) of another author, is 404.
func (s *Server) getGroupAuditEvent(w http.ResponseWriter, r *http.Request) error {
	p, scope, err := s.groupAuditScope(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "audit_event_id")
	if err != nil {
		return err
	}
	e, err := s.st.AuditEvent(id)
	if err != nil {
		return err
	}
	if e.EntityType != scope.EntityType || e.EntityID != scope.EntityID || (scope.AuthorID != 0 && e.AuthorID != scope.AuthorID) {
		return errRecordMissing
	}
	return s.writeAuditEvent(w, p, e)
}
