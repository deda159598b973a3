package store

import (
	"bytes"
	"encoding/binary"
	"time"

	"registryd/store/kv"
)

// Deleting groups, projects and users (GitLab's DELETE /groups/:id,
// /projects/:id and /users/:id). Each deletion is one transaction: it
// removes the record, everything that exists only inside it, and every index
// entry that names it, so that no reader ever meets half of a deletion. What
// happens to what, and where registryd differs from GitLab, is in
// docs/api.md ("Deleting groups, projects and users").
//
// The bytes of cache entries are not freed in the transaction: the
// upstreams' entries are purged with a mark (markUpstreamPendingTx, through
// deleteUpstreamTx) as DeleteRegistry and DeleteUpstream do, and the
// collector destroys them and frees their blobs in batches.

// Deleted says what a deletion took with it that the caller may hold state
// about: the ids of the upstreams deleted (their health, for one).
type Deleted struct {
	Upstreams []int64
}

// DeleteGroup removes the group and, with it, its subgroups, their projects
// (see DeleteProject), the virtual registries and upstreams of them all
// (cache entries marked for destruction), their deploy tokens, cleanup
// policies and direct memberships.
func (s *Store) DeleteGroup(id int64) (Deleted, error) {
	var d Deleted
	err := s.update(true, true, func(tx kv.Tx) error {
		d = Deleted{} // kv may run the function again
		if _, ok := groupTx(tx, id); !ok {
			return notFound("Group")
		}
		return deleteGroupTx(tx, id, s.clock(), &d.Upstreams)
	})
	if err != nil {
		return Deleted{}, err
	}
	s.forget.bump(d.Upstreams...)
	return d, nil
}

// DeleteProject removes the project, its direct memberships, its dependency
// list (with its vulnerabilities) and its events.
func (s *Store) DeleteProject(id int64) error {
	return s.update(true, false, func(tx kv.Tx) error {
		if _, ok := projectTx(tx, id); !ok {
			return notFound("Project")
		}
		return deleteProjectTx(tx, id)
	})
}

// ErrSoleOwner is DeleteUser's refusal of a user who is the only direct
// owner of a group, unless the deletion is hard: GitLab's 409.
var ErrSoleOwner = &ConflictError{Reason: "User cannot be removed while is the sole-owner of a group"}

// ErrLastAdmin is DeleteUser's refusal of the last administrator: without
// one, nobody could create users or groups again.
var ErrLastAdmin = &ConflictError{Reason: "The last administrator cannot be removed"}

// DeleteUser removes the user, their personal access tokens and their
// direct memberships. A user who is the only direct owner of a group is
// refused (ErrSoleOwner) unless hard is set; with hard, those groups are
// deleted (see DeleteGroup) and so are the events the user authored.
// Without hard, their events stay, by an author who no longer exists. The
// last administrator is refused (ErrLastAdmin).
func (s *Store) DeleteUser(id int64, hard bool) (Deleted, error) {
	var d Deleted
	err := s.update(true, true, func(tx kv.Tx) error {
		d = Deleted{}
		u, ok := userTx(tx, id)
		if !ok {
			return notFound("User")
		}
		if u.Admin && adminCountTx(tx) <= 1 {
			return ErrLastAdmin
		}
		owned := soleOwnedGroupsTx(tx, id)
		if len(owned) > 0 && !hard {
			return ErrSoleOwner
		}
		now := s.clock()
		for _, g := range owned {
			if _, ok := groupTx(tx, g); !ok {
				continue // a subgroup of a group deleted before it
			}
			if err := deleteGroupTx(tx, g, now, &d.Upstreams); err != nil {
				return err
			}
		}
		if hard {
			if err := deleteEventsOfTx(tx, bktEventsByAuthor, id); err != nil {
				return err
			}
		}
		return deleteUserTx(tx, u)
	})
	if err != nil {
		return Deleted{}, err
	}
	s.forget.bump(d.Upstreams...)
	return d, nil
}

// deleteGroupTx removes the group and its subtree (subgroups first), adding
// the ids of the upstreams it deleted to upstreams.
func deleteGroupTx(tx kv.Tx, id int64, now time.Time, upstreams *[]int64) error {
	for _, child := range childIDs(tx.Bucket(bktGroupChildren), id) {
		if err := deleteGroupTx(tx, child, now, upstreams); err != nil {
			return err
		}
	}
	g, ok := groupTx(tx, id)
	if !ok {
		return nil
	}
	for _, p := range childIDs(tx.Bucket(bktGroupProjects), id) {
		if err := deleteProjectTx(tx, p); err != nil {
			return err
		}
	}
	// The upstreams first: deleting one removes its associations, and marks
	// its cache entries for destruction.
	for _, u := range childIDs(tx.Bucket(bktGroupUpstreams), id) {
		if err := deleteUpstreamTx(tx, u, now); err != nil {
			return err
		}
		*upstreams = append(*upstreams, u)
	}
	for _, r := range childIDs(tx.Bucket(bktGroupRegs), id) {
		for _, a := range assocsOfRegistryTx(tx, r) {
			if err := deleteAssocTx(tx, a); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bktRegistries).Delete(itob(r)); err != nil {
			return err
		}
		if err := tx.Bucket(bktGroupRegs).Delete(pair(id, r)); err != nil {
			return err
		}
	}
	deploy := tx.Bucket(bktDeployTokens)
	for _, t := range childIDs(tx.Bucket(bktDeployByGroup), id) {
		var dt DeployToken
		if getJSON(deploy, itob(t), &dt) {
			if err := tx.Bucket(bktDeployByHash).Delete(dt.Hash); err != nil {
				return err
			}
		}
		if err := deploy.Delete(itob(t)); err != nil {
			return err
		}
		if err := tx.Bucket(bktDeployByGroup).Delete(pair(id, t)); err != nil {
			return err
		}
	}
	if err := tx.Bucket(bktCleanupPolicies).Delete(itob(id)); err != nil {
		return err
	}
	if err := deleteMembershipsTx(tx, groupMembers, id); err != nil {
		return err
	}
	if err := tx.Bucket(bktGroupsByPath).Delete(lower(g.FullPath)); err != nil {
		return err
	}
	if g.ParentID != 0 {
		if err := tx.Bucket(bktGroupChildren).Delete(pair(g.ParentID, id)); err != nil {
			return err
		}
	}
	return tx.Bucket(bktGroups).Delete(itob(id))
}

// deleteProjectTx removes the project and what is only its own.
func deleteProjectTx(tx kv.Tx, id int64) error {
	p, ok := projectTx(tx, id)
	if !ok {
		return nil
	}
	if err := deleteMembershipsTx(tx, projectMembers, id); err != nil {
		return err
	}
	if err := deleteDependencyListTx(tx, id); err != nil {
		return err
	}
	if err := deleteEventsOfTx(tx, bktEventsByProject, id); err != nil {
		return err
	}
	if err := tx.Bucket(bktProjectsPath).Delete(lower(p.FullPath)); err != nil {
		return err
	}
	if err := tx.Bucket(bktGroupProjects).Delete(pair(p.NamespaceID, id)); err != nil {
		return err
	}
	return tx.Bucket(bktProjects).Delete(itob(id))
}

// deleteMembershipsTx removes every direct membership of the group or
// project source, with the members' index entries.
func deleteMembershipsTx(tx kv.Tx, k memberKind, source int64) error {
	members, byUser := tx.Bucket(k.members), tx.Bucket(k.byUser)
	for _, user := range childIDs(members, source) {
		if err := members.Delete(pair(source, user)); err != nil {
			return err
		}
		if err := byUser.Delete(pair(user, source)); err != nil {
			return err
		}
	}
	return nil
}

// deleteDependencyListTx removes a project's dependency list in either
// layout, its package index entries and its vulnerabilities.
func deleteDependencyListTx(tx kv.Tx, project int64) error {
	prefix := itob(project)
	for _, b := range [][]byte{bktDependencies, bktDepsByPM} {
		if err := deletePrefix(tx.Bucket(b), prefix); err != nil {
			return err
		}
	}
	byPkg := tx.Bucket(bktDepsByPkg)
	for k := range oldPackageKeys(byPkg, project) {
		if err := byPkg.Delete([]byte(k)); err != nil {
			return err
		}
	}
	if err := byPkg.Delete(pkgManifestKey(project)); err != nil {
		return err
	}
	vulns, byKey := tx.Bucket(bktVulns), tx.Bucket(bktVulnsByKey)
	ids := map[int64]bool{}
	c := byKey.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		ids[btoi(v)] = true
	}
	for id := range ids {
		if err := vulns.Delete(itob(id)); err != nil {
			return err
		}
	}
	if err := deletePrefix(byKey, prefix); err != nil {
		return err
	}
	return tx.Bucket(bktDepLists).Delete(prefix)
}

// deleteEventsOfTx removes every event of one scope: index is
// bktEventsByProject (a project's events) or bktEventsByAuthor (a user's),
// and scope the project's or the user's id. Each event leaves the record,
// its four index entries and its three counts.
func deleteEventsOfTx(tx kv.Tx, index []byte, scope int64) error {
	type ev struct {
		id  int64
		hdr []byte
	}
	var evs []ev
	prefix := itob(scope)
	c := tx.Bucket(index).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) == 16 && len(v) >= evHdrLen {
			evs = append(evs, ev{btoi(k[8:]), bytes.Clone(v[:evHdrLen])})
		}
	}
	if len(evs) == 0 {
		return nil
	}
	events, byProject, byAuthor := tx.Bucket(bktEvents), tx.Bucket(bktEventsByProject), tx.Bucket(bktEventsByAuthor)
	byProjectAct, byAuthorAct := tx.Bucket(bktEventsByProjectAct), tx.Bucket(bktEventsByAuthorAct)
	delta := map[string]uint64{}
	for _, e := range evs {
		project, author, act := hdrProject(e.hdr), int64(binary.BigEndian.Uint64(e.hdr[16:])), e.hdr[24]
		dels := []struct {
			b kv.Bucket
			k []byte
		}{
			{events, itob(e.id)},
			{byProject, scopedKey(project, 0, false, e.id)},
			{byAuthor, scopedKey(author, 0, false, e.id)},
			{byProjectAct, scopedKey(project, act, true, e.id)},
			{byAuthorAct, scopedKey(author, act, true, e.id)},
		}
		for _, d := range dels {
			if err := d.b.Delete(d.k); err != nil {
				return err
			}
		}
		delta[string(countKeyGlobal(act))]++
		delta[string(countKeyProject(project, act))]++
		delta[string(countKeyAuthor(author, project, act))]++
	}
	counts := tx.Bucket(bktEventCounts)
	for k, d := range delta {
		var n uint64
		if v := counts.Get([]byte(k)); v != nil {
			n = binary.BigEndian.Uint64(v)
		}
		if n <= d {
			if err := counts.Delete([]byte(k)); err != nil {
				return err
			}
			continue
		}
		if err := counts.Put([]byte(k), itob(int64(n-d))); err != nil {
			return err
		}
	}
	return nil
}

// deleteUserTx removes the user's record, name and email index entries,
// personal access tokens and direct memberships.
func deleteUserTx(tx kv.Tx, u User) error {
	tokens, byUser, byHash := tx.Bucket(bktTokens), tx.Bucket(bktTokensByUser), tx.Bucket(bktTokensByHash)
	for _, t := range childIDs(byUser, u.ID) {
		var tok Token
		if getJSON(tokens, itob(t), &tok) {
			if err := byHash.Delete(tok.Hash); err != nil {
				return err
			}
		}
		if err := tokens.Delete(itob(t)); err != nil {
			return err
		}
		if err := byUser.Delete(pair(u.ID, t)); err != nil {
			return err
		}
	}
	for _, k := range []memberKind{groupMembers, projectMembers} {
		members := tx.Bucket(k.members)
		for _, source := range childIDs(tx.Bucket(k.byUser), u.ID) {
			if err := members.Delete(pair(source, u.ID)); err != nil {
				return err
			}
			if err := tx.Bucket(k.byUser).Delete(pair(u.ID, source)); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bktUsersByName).Delete(lower(u.Username)); err != nil {
		return err
	}
	if err := tx.Bucket(bktUsersByEmail).Delete(lower(u.Email)); err != nil {
		return err
	}
	return tx.Bucket(bktUsers).Delete(itob(u.ID))
}

// soleOwnedGroupsTx lists the groups of which the user is the only direct
// owner (GitLab's User#solo_owned_groups).
func soleOwnedGroupsTx(tx kv.Tx, user int64) []int64 {
	members := tx.Bucket(bktGroupMembers)
	var out []int64
	for _, g := range childIDs(tx.Bucket(bktUserGroups), user) {
		var m Member
		if !getJSON(members, pair(g, user), &m) || m.AccessLevel != Owner {
			continue
		}
		sole := true
		for _, other := range childIDs(members, g) {
			var o Member
			if other != user && getJSON(members, pair(g, other), &o) && o.AccessLevel == Owner {
				sole = false
				break
			}
		}
		if sole {
			out = append(out, g)
		}
	}
	return out
}

// adminCountTx is how many administrators exist.
func adminCountTx(tx kv.Tx) int {
	n := 0
	users := tx.Bucket(bktUsers)
	c := users.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		// Most users are not admins: a cheap look before decoding.
		if !bytes.Contains(v, []byte(`"admin":true`)) {
			continue
		}
		var u User
		if getJSON(users, k, &u) && u.Admin {
			n++
		}
	}
	return n
}
