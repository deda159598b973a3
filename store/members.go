package store

import (
	"slices"
	"time"

	"registryd/store/kv"
)

// Access levels, as GitLab numbers them.
const (
	NoAccess   = 0
	Guest      = 10
	Reporter   = 20
	Developer  = 30
	Maintainer = 40
	Owner      = 50
)

// ValidAccessLevel reports whether l is one of the five member levels.
func ValidAccessLevel(l int) bool {
	switch l {
	case Guest, Reporter, Developer, Maintainer, Owner:
		return true
	}
	return false
}

// Member is a user's direct membership of a group or project.
type Member struct {
	SourceID    int64      `json:"source_id"`
	UserID      int64      `json:"user_id"`
	AccessLevel int        `json:"access_level"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
}

// memberKind says which buckets hold one kind of membership.
type memberKind struct {
	members, byUser, sources []byte
	resource                 string
}

var (
	groupMembers   = memberKind{bktGroupMembers, bktUserGroups, bktGroups, "Group"}
	projectMembers = memberKind{bktProjectMembers, bktUserProjects, bktProjects, "Project"}
)

func addMemberTx(tx kv.Tx, k memberKind, source int64, m Member) (Member, error) {
	m.SourceID = source
	b := tx.Bucket(k.members)
	if b.Get(pair(source, m.UserID)) != nil {
		return m, &ConflictError{Reason: "Member already exists"}
	}
	if err := putJSON(b, pair(source, m.UserID), m); err != nil {
		return m, err
	}
	return m, tx.Bucket(k.byUser).Put(pair(m.UserID, source), emptyValue)
}

func (s *Store) addMember(k memberKind, source, user int64, level int, expires *time.Time, after func(tx kv.Tx, m Member) error) (Member, error) {
	if !ValidAccessLevel(level) {
		return Member{}, invalid("access_level", "is not included in the list")
	}
	m := Member{UserID: user, AccessLevel: level, ExpiresAt: expires, CreatedAt: s.clock()}
	err := s.update(true, false, func(tx kv.Tx) error {
		if tx.Bucket(k.sources).Get(itob(source)) == nil {
			return notFound(k.resource)
		}
		if _, ok := userTx(tx, user); !ok {
			return notFound("User")
		}
		var err error
		if m, err = addMemberTx(tx, k, source, m); err != nil {
			return err
		}
		if after != nil {
			return after(tx, m)
		}
		return nil
	})
	return m, err
}

func (s *Store) removeMember(k memberKind, source, user int64, after func(tx kv.Tx, m Member) error) error {
	return s.update(true, false, func(tx kv.Tx) error {
		if tx.Bucket(k.sources).Get(itob(source)) == nil {
			return notFound(k.resource)
		}
		b := tx.Bucket(k.members)
		var m Member
		if !getJSON(b, pair(source, user), &m) {
			return notFound("Member")
		}
		if err := b.Delete(pair(source, user)); err != nil {
			return err
		}
		if err := tx.Bucket(k.byUser).Delete(pair(user, source)); err != nil {
			return err
		}
		if after != nil {
			return after(tx, m)
		}
		return nil
	})
}

// AddGroupMember gives a user a direct membership of a group.
func (s *Store) AddGroupMember(group, user int64, level int, expires *time.Time) (Member, error) {
	return s.addMember(groupMembers, group, user, level, expires, nil)
}

// RemoveGroupMember ends a direct membership of a group.
func (s *Store) RemoveGroupMember(group, user int64) error {
	return s.removeMember(groupMembers, group, user, nil)
}

func memberLevel(tx kv.Tx, bucket []byte, source, user int64, now time.Time) int {
	var m Member
	if !getJSON(tx.Bucket(bucket), pair(source, user), &m) || expired(m.ExpiresAt, now) {
		return NoAccess
	}
	return m.AccessLevel
}

// groupLevelTx is the user's effective level in a group: the highest of its
// direct memberships of the group and of every ancestor.
func groupLevelTx(tx kv.Tx, group, user int64, now time.Time) int {
	best := NoAccess
	for _, g := range ancestorsTx(tx, group) {
		best = max(best, memberLevel(tx, bktGroupMembers, g.ID, user, now))
	}
	return best
}

// GroupAccessLevel is the user's effective access level in a group, inherited
// from ancestors.
func (s *Store) GroupAccessLevel(group, user int64) int {
	lvl := NoAccess
	now := s.clock()
	if err := s.db.View(func(tx kv.Tx) error { lvl = groupLevelTx(tx, group, user, now); return nil }); err != nil {
		s.readFailures.Add(1)
		return NoAccess
	}
	return lvl
}

// ProjectAccessLevel is the user's effective level in a project: its direct
// membership or its level in the project's namespace, whichever is higher.
func (s *Store) ProjectAccessLevel(project, user int64) int {
	lvl := NoAccess
	now := s.clock()
	if err := s.db.View(func(tx kv.Tx) error {
		p, ok := projectTx(tx, project)
		if !ok {
			return nil
		}
		lvl = max(memberLevel(tx, bktProjectMembers, project, user, now), groupLevelTx(tx, p.NamespaceID, user, now))
		return nil
	}); err != nil {
		s.readFailures.Add(1)
		return NoAccess
	}
	return lvl
}

// HasMembershipUnder reports whether the user is a direct member of any group
// or project inside the group top (the group itself included). top is
// usually a top-level group (who may read its registries), but any group
// works (who may see a private subgroup).
func (s *Store) HasMembershipUnder(top, user int64) bool {
	found := false
	now := s.clock()
	err := s.db.View(func(tx kv.Tx) error {
		for _, gid := range childIDs(tx.Bucket(bktUserGroups), user) {
			if inChain(ancestorsTx(tx, gid), top) && memberLevel(tx, bktGroupMembers, gid, user, now) > NoAccess {
				found = true
				return nil
			}
		}
		for _, pid := range childIDs(tx.Bucket(bktUserProjects), user) {
			p, ok := projectTx(tx, pid)
			if !ok {
				continue
			}
			if inChain(ancestorsTx(tx, p.NamespaceID), top) && memberLevel(tx, bktProjectMembers, pid, user, now) > NoAccess {
				found = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		s.readFailures.Add(1)
		return false
	}
	return found
}

// inChain reports whether group is one of chain's groups.
func inChain(chain []Group, group int64) bool {
	return slices.ContainsFunc(chain, func(g Group) bool { return g.ID == group })
}
