package store

import (
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"registryd/store/kv"
)

// Visibility levels of groups and projects.
const (
	Private  = "private"
	Internal = "internal"
	Public   = "public"
)

func validVisibility(v string) bool { return v == Private || v == Internal || v == Public }

// Group is a namespace of projects and subgroups; top-level groups own
// virtual registries and upstreams.
type Group struct {
	ID          int64     `json:"id"`
	ParentID    int64     `json:"parent_id,omitempty"`
	Name        string    `json:"name"`
	Path        string    `json:"path"`
	FullPath    string    `json:"full_path"`
	FullName    string    `json:"full_name"`
	Description string    `json:"description"`
	Visibility  string    `json:"visibility"`
	CreatedAt   time.Time `json:"created_at"`
}

// TopLevel reports whether the group has no parent.
func (g Group) TopLevel() bool { return g.ParentID == 0 }

// NewGroup is the input of CreateGroup.
type NewGroup struct {
	Name, Path, Description, Visibility string
	ParentID                            int64
	// CreatorID, when set, becomes an owner of the new group.
	CreatorID int64
}

var pathRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

func validPath(v *ValidationError, path string) {
	switch {
	case path == "":
		v.Add("path", "can't be blank")
	case len(path) > 255:
		v.Add("path", "is too long (maximum is 255 characters)")
	case !pathRE.MatchString(path) || strings.HasSuffix(path, ".git") || strings.HasSuffix(path, ".atom") || strings.HasSuffix(path, "."):
		v.Add("path", "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-', end in '.git' or end in '.atom'")
	}
}

// overLimit reports whether s has more than max characters. Limits count
// characters, as GitLab's do, not bytes: a name of 255 accented letters fits.
func overLimit(s string, max int) bool { return utf8.RuneCountInString(s) > max }

func validName(v *ValidationError, name string, max int) {
	switch {
	case strings.TrimSpace(name) == "":
		v.Add("name", "can't be blank")
	case overLimit(name, max):
		v.Add("name", "is too long (maximum is "+strconv.Itoa(max)+" characters)")
	}
}

// CreateGroup adds a group (a subgroup when ParentID is set).
func (s *Store) CreateGroup(n NewGroup) (Group, error) {
	if n.Visibility == "" {
		n.Visibility = Private
	}
	if err := validNamespaced(n.Name, n.Path, n.Visibility, n.Description, 1024); err != nil {
		return Group{}, err
	}
	g := Group{ParentID: n.ParentID, Name: n.Name, Path: n.Path, Description: n.Description,
		Visibility: n.Visibility, CreatedAt: s.clock()}
	err := s.update(true, false, func(tx kv.Tx) error {
		id, err := insertNamespacedTx(tx, groupNS, n.ParentID, n.Path, n.Name, n.Visibility, func(at placed) any {
			g.ID, g.FullPath, g.FullName = at.ID, at.FullPath, at.FullName
			return g
		})
		if err != nil {
			return err
		}
		if n.CreatorID != 0 {
			if _, ok := userTx(tx, n.CreatorID); !ok {
				return notFound("User")
			}
			_, err := addMemberTx(tx, groupMembers, id, Member{UserID: n.CreatorID, AccessLevel: Owner, CreatedAt: g.CreatedAt})
			return err
		}
		return nil
	})
	return g, err
}

func groupTx(tx kv.Tx, id int64) (Group, bool) {
	var g Group
	ok := getJSON(tx.Bucket(bktGroups), itob(id), &g)
	return g, ok
}

// refID resolves "42" or a (case-insensitive) full path through byPath.
func refID(tx kv.Tx, byPath []byte, ref string) int64 {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil && id > 0 {
		return id
	}
	if v := tx.Bucket(byPath).Get(lower(ref)); v != nil {
		return btoi(v)
	}
	return 0
}

// Group returns a group by id.
func (s *Store) Group(id int64) (Group, error) { return s.GroupByRef(strconv.FormatInt(id, 10)) }

// GroupByRef returns a group by numeric id or full path, its visibility
// capped by its ancestors' (see visibility.go).
func (s *Store) GroupByRef(ref string) (Group, error) {
	var g Group
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		if g, ok = groupTx(tx, refID(tx, bktGroupsByPath, ref)); !ok {
			return notFound("Group")
		}
		g = cappedGroupTx(tx, g)
		return nil
	})
	return g, err
}

// ancestorsTx returns the group and its ancestors, the group first.
func ancestorsTx(tx kv.Tx, id int64) []Group {
	var chain []Group
	for id != 0 && len(chain) < 32 {
		g, ok := groupTx(tx, id)
		if !ok {
			break
		}
		chain = append(chain, g)
		id = g.ParentID
	}
	return chain
}

// topLevelGroup returns the root of the group's hierarchy.
func (s *Store) topLevelGroup(id int64) (Group, error) {
	var g Group
	err := s.db.View(func(tx kv.Tx) error {
		chain := ancestorsTx(tx, id)
		if len(chain) == 0 {
			return notFound("Group")
		}
		g = chain[len(chain)-1]
		return nil
	})
	return g, err
}
