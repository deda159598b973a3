package store

import (
	"strconv"
	"strings"
	"time"

	"registryd/store/kv"
)

// Project is a project in a group namespace.
type Project struct {
	ID          int64     `json:"id"`
	NamespaceID int64     `json:"namespace_id"`
	Name        string    `json:"name"`
	Path        string    `json:"path"`
	FullPath    string    `json:"full_path"`
	FullName    string    `json:"full_name"`
	Description string    `json:"description"`
	Visibility  string    `json:"visibility"`
	CreatorID   int64     `json:"creator_id"`
	CreatedAt   time.Time `json:"created_at"`
}

// NewProject is the input of CreateProject.
type NewProject struct {
	Name, Path, Description, Visibility string
	NamespaceID, CreatorID              int64
}

// defaultProjectPath derives a path from a name as GitLab does for the common
// case: lower-case, spaces to dashes.
func defaultProjectPath(name string) string {
	return strings.ToLower(strings.Join(strings.Fields(name), "-"))
}

// CreateProject adds a project to a group namespace.
func (s *Store) CreateProject(n NewProject) (Project, error) {
	if n.Visibility == "" {
		n.Visibility = Private
	}
	if n.Path == "" {
		n.Path = defaultProjectPath(n.Name)
	}
	if err := validNamespaced(n.Name, n.Path, n.Visibility, n.Description, 2000); err != nil {
		return Project{}, err
	}
	p := Project{NamespaceID: n.NamespaceID, Name: n.Name, Path: n.Path, Description: n.Description,
		Visibility: n.Visibility, CreatorID: n.CreatorID, CreatedAt: s.clock()}
	err := s.update(true, false, func(tx kv.Tx) error {
		id, err := insertNamespacedTx(tx, projectNS, n.NamespaceID, n.Path, n.Name, n.Visibility, func(at placed) any {
			p.ID, p.FullPath, p.FullName = at.ID, at.FullPath, at.FullName
			return p
		})
		if err != nil {
			return err
		}
		// The creation is the project's first event, by its creator, written
		// with it. A project made by no user (CreatorID 0) has no author.
		if _, ok := userTx(tx, p.CreatorID); !ok {
			return nil
		}
		return recordEventTx(tx, Event{ProjectID: id, AuthorID: p.CreatorID, Action: ActionCreated, CreatedAt: p.CreatedAt})
	})
	return p, err
}

func projectTx(tx kv.Tx, id int64) (Project, bool) {
	var p Project
	ok := getJSON(tx.Bucket(bktProjects), itob(id), &p)
	return p, ok
}

// Project returns a project by id.
func (s *Store) Project(id int64) (Project, error) {
	return s.ProjectByRef(strconv.FormatInt(id, 10))
}

// ProjectByRef returns a project by numeric id or full path, its visibility
// capped by its namespace's and their ancestors' (see visibility.go).
func (s *Store) ProjectByRef(ref string) (Project, error) {
	var p Project
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		if p, ok = projectTx(tx, refID(tx, bktProjectsPath, ref)); !ok {
			return notFound("Project")
		}
		p = cappedProjectTx(tx, p)
		return nil
	})
	return p, err
}

// AddProjectMember gives a user a direct membership of a project. actor is
// who did it. A joined event is recorded in the same transaction; its author
// is the new member, as in GitLab, whoever added them.
func (s *Store) AddProjectMember(project, user int64, level int, expires *time.Time, actor int64) (Member, error) {
	return s.addMember(projectMembers, project, user, level, expires, func(tx kv.Tx, m Member) error {
		return recordEventTx(tx, Event{ProjectID: project, AuthorID: m.UserID, Action: ActionJoined, CreatedAt: m.CreatedAt})
	})
}

// RemoveProjectMember ends a direct membership of a project. actor is who did
// it. A left event is recorded in the same transaction; its author is the
// member who left, as in GitLab, whoever removed them.
func (s *Store) RemoveProjectMember(project, user, actor int64) error {
	now := s.clock()
	return s.removeMember(projectMembers, project, user, func(tx kv.Tx, m Member) error {
		return recordEventTx(tx, Event{ProjectID: project, AuthorID: m.UserID, Action: ActionLeft, CreatedAt: now})
	})
}
