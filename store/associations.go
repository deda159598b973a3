package store

import (
	"slices"

	"registryd/store/kv"
)

func assocTx(tx kv.Tx, id int64) (RegistryUpstream, bool) {
	var a RegistryUpstream
	ok := getJSON(tx.Bucket(bktAssocs), itob(id), &a)
	return a, ok
}

// assocsOfRegistryTx returns the registry's associations ordered by position.
func assocsOfRegistryTx(tx kv.Tx, registry int64) []RegistryUpstream {
	var out []RegistryUpstream
	for _, id := range childIDs(tx.Bucket(bktRegAssocs), registry) {
		if a, ok := assocTx(tx, id); ok {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b RegistryUpstream) int { return a.Position - b.Position })
	return out
}

func putAssocTx(tx kv.Tx, a RegistryUpstream) error {
	return putJSON(tx.Bucket(bktAssocs), itob(a.ID), a)
}

func appendAssocTx(tx kv.Tx, registry, upstream int64) (RegistryUpstream, error) {
	existing := assocsOfRegistryTx(tx, registry)
	if len(existing) >= MaxUpstreamsPerRegistry {
		return RegistryUpstream{}, invalid("registry_upstreams.position", "must be less than or equal to 20")
	}
	id, err := nextID(tx.Bucket(bktAssocs))
	if err != nil {
		return RegistryUpstream{}, err
	}
	a := RegistryUpstream{ID: id, RegistryID: registry, UpstreamID: upstream, Position: len(existing) + 1}
	if err := putAssocTx(tx, a); err != nil {
		return a, err
	}
	if err := tx.Bucket(bktRegAssocs).Put(pair(registry, id), emptyValue); err != nil {
		return a, err
	}
	return a, tx.Bucket(bktUpAssocs).Put(pair(upstream, id), emptyValue)
}

// deleteAssocTx removes an association and closes the gap in its registry.
func deleteAssocTx(tx kv.Tx, a RegistryUpstream) error {
	if err := tx.Bucket(bktAssocs).Delete(itob(a.ID)); err != nil {
		return err
	}
	if err := tx.Bucket(bktRegAssocs).Delete(pair(a.RegistryID, a.ID)); err != nil {
		return err
	}
	if err := tx.Bucket(bktUpAssocs).Delete(pair(a.UpstreamID, a.ID)); err != nil {
		return err
	}
	for i, o := range assocsOfRegistryTx(tx, a.RegistryID) {
		if o.Position != i+1 {
			o.Position = i + 1
			if err := putAssocTx(tx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// Associate appends an existing upstream of the registry's group to the registry.
func (s *Store) Associate(registry, upstream int64) (RegistryUpstream, error) {
	var a RegistryUpstream
	err := s.update(false, true, func(tx kv.Tx) error {
		r, ok := registryTx(tx, registry)
		if !ok {
			return notFound("Registry")
		}
		var u Upstream
		if !getJSON(tx.Bucket(bktUpstreams), itob(upstream), &u) || u.GroupID != r.GroupID {
			return notFound("Upstream")
		}
		for _, o := range assocsOfRegistryTx(tx, registry) {
			if o.UpstreamID == upstream {
				return invalid("upstream_id", "has already been taken")
			}
		}
		var err error
		a, err = appendAssocTx(tx, registry, upstream)
		return err
	})
	return a, err
}

// Association returns an association by id.
func (s *Store) Association(id int64) (RegistryUpstream, error) {
	var a RegistryUpstream
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		if a, ok = assocTx(tx, id); !ok {
			return notFound("Registry Upstream")
		}
		return nil
	})
	return a, err
}

// MoveAssociation moves an upstream to position (capped at the registry's
// current maximum); the upstreams in between shift by one.
func (s *Store) MoveAssociation(id int64, position int) (RegistryUpstream, error) {
	var moved RegistryUpstream
	err := s.update(false, true, func(tx kv.Tx) error {
		a, ok := assocTx(tx, id)
		if !ok {
			return notFound("Registry Upstream")
		}
		list := assocsOfRegistryTx(tx, a.RegistryID)
		// Not assigned to position: a retried transaction (kv) clamps the
		// requested position again, against the list it then reads.
		pos := min(max(position, 1), len(list))
		from := slices.IndexFunc(list, func(o RegistryUpstream) bool { return o.ID == id })
		item := list[from]
		list = slices.Delete(list, from, from+1)
		list = slices.Insert(list, pos-1, item)
		for i, o := range list {
			if o.Position != i+1 {
				o.Position = i + 1
				if err := putAssocTx(tx, o); err != nil {
					return err
				}
			}
			if o.ID == id {
				moved = o
				moved.Position = i + 1
			}
		}
		return nil
	})
	return moved, err
}

// DeleteAssociation removes an upstream from a registry and closes the gap;
// an upstream left in no registry is deleted with its cache.
func (s *Store) DeleteAssociation(id int64) error {
	return s.update(false, true, func(tx kv.Tx) error {
		a, ok := assocTx(tx, id)
		if !ok {
			return notFound("Registry Upstream")
		}
		if err := deleteAssocTx(tx, a); err != nil {
			return err
		}
		if len(childIDs(tx.Bucket(bktUpAssocs), a.UpstreamID)) == 0 {
			return deleteUpstreamTx(tx, a.UpstreamID, s.clock())
		}
		return nil
	})
}
