package store

import "registryd/store/kv"

// A project or subgroup may be no more visible than its parent, as in
// GitLab: otherwise a public project of a private group names that group
// (its namespace, its owners among the inherited members) to everyone.
// Creation refuses it; for records written before that rule, every read
// (Group, Groups, Project, Projects and their ...ByRef forms) caps the
// visibility at the most private ancestor, so the access checks, which all
// consult Visibility, never grant more than that ancestor does.

// visibilityRank orders the levels from the most private, as GitLab's
// numeric levels (0, 10, 20) do.
func visibilityRank(v string) int {
	switch v {
	case Public:
		return 2
	case Internal:
		return 1
	}
	return 0 // private, and anything unknown: the safe side
}

// mostPrivate returns the less visible of two levels.
func mostPrivate(a, b string) string {
	if visibilityRank(b) < visibilityRank(a) {
		return b
	}
	return a
}

// effectiveVisibilityTx is the visibility of group id capped by all its
// ancestors. A missing group in the chain (or one deeper than ancestorsTx
// follows) counts as private: the safe side.
func effectiveVisibilityTx(tx kv.Tx, id int64) string {
	v := Public
	for depth := 0; id != 0; depth++ {
		g, ok := groupTx(tx, id)
		if !ok || depth >= 32 {
			return Private
		}
		v = mostPrivate(v, g.Visibility)
		id = g.ParentID
	}
	return v
}

// cappedGroupTx is g as readers see it: no more visible than its parent
// chain.
func cappedGroupTx(tx kv.Tx, g Group) Group {
	if g.ParentID != 0 {
		g.Visibility = mostPrivate(g.Visibility, effectiveVisibilityTx(tx, g.ParentID))
	}
	return g
}

// cappedProjectTx is p as readers see it: no more visible than its
// namespace and the namespace's ancestors.
func cappedProjectTx(tx kv.Tx, p Project) Project {
	p.Visibility = mostPrivate(p.Visibility, effectiveVisibilityTx(tx, p.NamespaceID))
	return p
}

// effectiveVisibilities caps every group of byID by its ancestors, each
// chain walked once: the list reads decide for all groups together.
func effectiveVisibilities(byID map[int64]Group) map[int64]string {
	out := make(map[int64]string, len(byID))
	var resolve func(id int64, depth int) string
	resolve = func(id int64, depth int) string {
		if v, ok := out[id]; ok {
			return v
		}
		g, ok := byID[id]
		if !ok || depth >= 32 {
			return Private // as effectiveVisibilityTx
		}
		v := g.Visibility
		if g.ParentID != 0 {
			v = mostPrivate(v, resolve(g.ParentID, depth+1))
		}
		out[id] = v
		return v
	}
	for id := range byID {
		resolve(id, 0)
	}
	return out
}

// checkChildVisibility refuses a child (a project or subgroup) more visible
// than its parent's effective level, with GitLab's messages.
func checkChildVisibility(child, parent string, project bool) error {
	if visibilityRank(child) <= visibilityRank(parent) {
		return nil
	}
	if project {
		return invalid("visibility_level", child+" is not allowed in a "+parent+" group.")
	}
	return invalid("visibility_level", child+" is not allowed since the parent group has a "+parent+" visibility.")
}
