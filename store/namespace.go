package store

import (
	"strconv"

	"registryd/store/kv"
)

// Groups and projects share one namespace of URLs: a full path is a group's
// or a project's, never both, and each sits in a parent group (a group may
// also stand at the top) no more visible than the parent.

// nsKind is one kind of thing with a full path in the namespace: where its
// records, its path index and its parent's links are.
type nsKind struct {
	records []byte // id -> JSON record
	byPath  []byte // lower(full path) -> id
	links   []byte // pair(parent group id, id) -> empty
	project bool   // a project: it needs a parent, and checkChildVisibility speaks of a project
	parent  string // what the not-found error names when the parent group does not exist
}

var (
	groupNS   = nsKind{records: bktGroups, byPath: bktGroupsByPath, links: bktGroupChildren, parent: "Parent Group"}
	projectNS = nsKind{records: bktProjects, byPath: bktProjectsPath, links: bktGroupProjects, project: true, parent: "Namespace"}
)

// validNamespaced checks the fields a new group and a new project share, the
// description of at most maxDescription characters.
func validNamespaced(name, path, visibility, description string, maxDescription int) error {
	v := &ValidationError{}
	validName(v, name, 255)
	validPath(v, path)
	if !validVisibility(visibility) {
		v.Add("visibility_level", "is invalid")
	}
	if overLimit(description, maxDescription) {
		v.Add("description", "is too long (maximum is "+strconv.Itoa(maxDescription)+" characters)")
	}
	return v.Err()
}

// placed is where insertNamespacedTx puts a new group or project.
type placed struct {
	ID                 int64
	FullPath, FullName string
}

// insertNamespacedTx claims path under the group parentID (0: at the top,
// for a group) for a new group or project of kind k named name, with the
// visibility: the parent must exist and be no less visible, and no group or
// project may have the full path. It takes the next id of the kind and
// stores record(where it went) under it, with the path index and the
// parent's link.
func insertNamespacedTx(tx kv.Tx, k nsKind, parentID int64, path, name, visibility string, record func(placed) any) (int64, error) {
	at := placed{FullPath: path, FullName: name}
	if parentID != 0 || k.project {
		parent, ok := groupTx(tx, parentID)
		if !ok {
			return 0, notFound(k.parent)
		}
		if err := checkChildVisibility(visibility, effectiveVisibilityTx(tx, parent.ID), k.project); err != nil {
			return 0, err
		}
		at.FullPath = parent.FullPath + "/" + path
		at.FullName = parent.FullName + " / " + name
	}
	if pathTaken(tx, at.FullPath) {
		return 0, invalid("path", "has already been taken")
	}
	b := tx.Bucket(k.records)
	id, err := nextID(b)
	if err != nil {
		return 0, err
	}
	at.ID = id
	if err := putJSON(b, itob(id), record(at)); err != nil {
		return 0, err
	}
	if err := tx.Bucket(k.byPath).Put(lower(at.FullPath), itob(id)); err != nil {
		return 0, err
	}
	if parentID != 0 {
		if err := tx.Bucket(k.links).Put(pair(parentID, id), emptyValue); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// pathTaken reports whether a group or a project already has the full path:
// both live in one namespace of URLs.
func pathTaken(tx kv.Tx, fullPath string) bool {
	return tx.Bucket(bktGroupsByPath).Get(lower(fullPath)) != nil || tx.Bucket(bktProjectsPath).Get(lower(fullPath)) != nil
}
