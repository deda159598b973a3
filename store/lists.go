package store

import (
	"cmp"
	"slices"
	"time"

	"registryd/store/kv"
)

// Reads for the GitLab list endpoints (GET /groups, /projects, member lists,
// personal access tokens). Each reads in one transaction, so a list never
// mixes two states of the index.

// Now is the store's clock: what "expired" and "active" are decided
// against.
func (s *Store) Now() time.Time { return s.clock() }

// Groups returns every group, by id, each visibility capped by its
// ancestors' (see visibility.go).
func (s *Store) Groups() ([]Group, error) {
	var out []Group
	err := s.db.View(func(tx kv.Tx) error {
		var err error
		out, err = groupsTx(tx)
		if err != nil {
			return err
		}
		vis := effectiveVisibilities(groupMap(out))
		for i := range out {
			out[i].Visibility = vis[out[i].ID]
		}
		return nil
	})
	return out, err
}

// groupsTx decodes every group, by id, as stored.
func groupsTx(tx kv.Tx) ([]Group, error) {
	var out []Group
	b := tx.Bucket(bktGroups)
	err := b.ForEach(func(k, _ []byte) error {
		var g Group
		getJSON(b, k, &g)
		out = append(out, g)
		return nil
	})
	return out, err
}

func groupMap(gs []Group) map[int64]Group {
	m := make(map[int64]Group, len(gs))
	for _, g := range gs {
		m[g.ID] = g
	}
	return m
}

// Projects returns every project, by id, each visibility capped by its
// namespace's and their ancestors' (see visibility.go).
func (s *Store) Projects() ([]Project, error) {
	var out []Project
	err := s.db.View(func(tx kv.Tx) error {
		groups, err := groupsTx(tx)
		if err != nil {
			return err
		}
		vis := effectiveVisibilities(groupMap(groups))
		b := tx.Bucket(bktProjects)
		return b.ForEach(func(k, _ []byte) error {
			var p Project
			getJSON(b, k, &p)
			ns, ok := vis[p.NamespaceID]
			if !ok {
				ns = Private
			}
			p.Visibility = mostPrivate(p.Visibility, ns)
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

// Access is one user's active direct memberships together with the group
// tree, read in one transaction. A list decides for every group and project
// what the user may reach without a read per item; the answers are those of
// GroupAccessLevel, ProjectAccessLevel and HasMembershipUnder.
type Access struct {
	groups   map[int64]int   // group id -> direct level
	projects map[int64]int   // project id -> direct level
	parent   map[int64]int64 // every subgroup's parent
	below    map[int64]bool  // groups with a membership at or below them
}

// UserAccess reads the memberships of user (0: none, an empty Access).
func (s *Store) UserAccess(user int64) (Access, error) {
	a := Access{groups: map[int64]int{}, projects: map[int64]int{}, parent: map[int64]int64{}, below: map[int64]bool{}}
	now := s.clock()
	err := s.db.View(func(tx kv.Tx) error {
		// The tree comes from the children index: keys only, no record
		// decoded.
		c := tx.Bucket(bktGroupChildren).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) == 16 {
				a.parent[btoi(k[8:])] = btoi(k[:8])
			}
		}
		if user == 0 {
			return nil
		}
		for _, gid := range childIDs(tx.Bucket(bktUserGroups), user) {
			if lvl := memberLevel(tx, bktGroupMembers, gid, user, now); lvl > NoAccess {
				a.groups[gid] = lvl
				a.markBelow(gid)
			}
		}
		for _, pid := range childIDs(tx.Bucket(bktUserProjects), user) {
			lvl := memberLevel(tx, bktProjectMembers, pid, user, now)
			p, ok := projectTx(tx, pid)
			if lvl == NoAccess || !ok {
				continue
			}
			a.projects[pid] = lvl
			a.markBelow(p.NamespaceID)
		}
		return nil
	})
	return a, err
}

// markBelow records that group and each of its ancestors hold a membership
// of the user at or below them.
func (a Access) markBelow(group int64) {
	for i := 0; group != 0 && i < 32; i++ {
		a.below[group] = true
		group = a.parent[group]
	}
}

// DirectGroupLevel is the user's own membership level in the group (0 for
// none), not inherited.
func (a Access) DirectGroupLevel(group int64) int { return a.groups[group] }

// GroupLevel is the user's effective level in the group: the highest of its
// direct memberships of the group and of every ancestor.
func (a Access) GroupLevel(group int64) int {
	best := NoAccess
	for i := 0; group != 0 && i < 32; i++ {
		best = max(best, a.groups[group])
		group = a.parent[group]
	}
	return best
}

// ProjectLevel is the user's effective level in the project: its direct
// membership or its level in the project's namespace, whichever is higher.
func (a Access) ProjectLevel(p Project) int {
	return max(a.projects[p.ID], a.GroupLevel(p.NamespaceID))
}

// MemberUnder reports whether the user is a member of the group or of
// any group or project inside it.
func (a Access) MemberUnder(group int64) bool { return a.below[group] }

// GroupMembers lists the active (not expired) direct members of a group in
// the order they joined.
func (s *Store) GroupMembers(group int64) ([]Member, error) {
	return s.members(groupMembers, group)
}

// ProjectMembers lists the active direct members of a project in the order
// they joined.
func (s *Store) ProjectMembers(project int64) ([]Member, error) {
	return s.members(projectMembers, project)
}

func (s *Store) members(k memberKind, source int64) ([]Member, error) {
	var out []Member
	now := s.clock()
	err := s.db.View(func(tx kv.Tx) error {
		if tx.Bucket(k.sources).Get(itob(source)) == nil {
			return notFound(k.resource)
		}
		out = activeMembersTx(tx, k.members, source, now)
		return nil
	})
	sortMembers(out)
	return out, err
}

// AllGroupMembers lists the active members of a group and of its ancestors,
// one per user: the membership with the highest level, the nearest group's
// on a tie.
func (s *Store) AllGroupMembers(group int64) ([]Member, error) {
	var out []Member
	now := s.clock()
	err := s.db.View(func(tx kv.Tx) error {
		chain := ancestorsTx(tx, group)
		if len(chain) == 0 {
			return notFound("Group")
		}
		out = inheritedTx(tx, nil, chain, now)
		return nil
	})
	return out, err
}

// AllProjectMembers lists the active members of a project and of its
// namespace and the namespace's ancestors, one per user as in
// AllGroupMembers, the project's own membership first on a tie.
func (s *Store) AllProjectMembers(project int64) ([]Member, error) {
	var out []Member
	now := s.clock()
	err := s.db.View(func(tx kv.Tx) error {
		p, ok := projectTx(tx, project)
		if !ok {
			return notFound("Project")
		}
		out = inheritedTx(tx, activeMembersTx(tx, bktProjectMembers, project, now), ancestorsTx(tx, p.NamespaceID), now)
		return nil
	})
	return out, err
}

// inheritedTx merges direct members (nearest first) with those of the
// groups of chain (nearest first), keeping each user's highest membership.
func inheritedTx(tx kv.Tx, direct []Member, chain []Group, now time.Time) []Member {
	best := map[int64]Member{}
	take := func(ms []Member) {
		for _, m := range ms {
			if have, ok := best[m.UserID]; !ok || m.AccessLevel > have.AccessLevel {
				best[m.UserID] = m
			}
		}
	}
	take(direct)
	for _, g := range chain {
		take(activeMembersTx(tx, bktGroupMembers, g.ID, now))
	}
	out := make([]Member, 0, len(best))
	for _, m := range best {
		out = append(out, m)
	}
	sortMembers(out)
	return out
}

// activeMembersTx lists the unexpired direct members of one source.
func activeMembersTx(tx kv.Tx, bucket []byte, source int64, now time.Time) []Member {
	var out []Member
	b := tx.Bucket(bucket)
	prefix := itob(source)
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && len(k) == 16 && string(k[:8]) == string(prefix); k, v = c.Next() {
		var m Member
		if v == nil || !getJSON(b, k, &m) || expired(m.ExpiresAt, now) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// sortMembers orders members as they joined (GitLab lists member records by
// id), then by user id.
func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.UserID, b.UserID))
	})
}

// Tokens lists the personal access tokens of user by id, or every user's
// when user is 0.
func (s *Store) Tokens(user int64) ([]Token, error) {
	var out []Token
	err := s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bktTokens)
		if user == 0 {
			return b.ForEach(func(k, _ []byte) error {
				var t Token
				getJSON(b, k, &t)
				out = append(out, t)
				return nil
			})
		}
		for _, id := range childIDs(tx.Bucket(bktTokensByUser), user) {
			var t Token
			if getJSON(b, itob(id), &t) {
				out = append(out, t)
			}
		}
		return nil
	})
	return out, err
}
