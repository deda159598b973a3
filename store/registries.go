package store

import (
	"errors"
	"time"

	"registryd/store/kv"
)

// Limits of the virtual registry model.
const (
	MaxRegistriesPerGroup   = 20
	MaxUpstreamsPerRegistry = 20
)

// Registry is a Maven virtual registry of a top-level group.
type Registry struct {
	ID          int64     `json:"id"`
	GroupID     int64     `json:"group_id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// MetadataMergeOff turns off the merge of maven-metadata.xml across the
	// registry's upstreams (the first upstream that has the file answers,
	// as in GitLab). Stored negated so that records written before the
	// switch existed read as merging, the default; see MergeMetadata.
	MetadataMergeOff bool `json:"metadata_merge_off,omitempty"`
}

// MergeMetadata reports whether the registry merges maven-metadata.xml
// across its upstreams (the default).
func (r Registry) MergeMetadata() bool { return !r.MetadataMergeOff }

// NewRegistry is the input of CreateRegistryFrom.
type NewRegistry struct {
	Name, Description string
	// MergeMetadata nil means the default, true.
	MergeMetadata *bool
}

func validRegistry(name, description string) error {
	v := &ValidationError{}
	validName(v, name, 255)
	if overLimit(description, 1024) {
		v.Add("description", "is too long (maximum is 1024 characters)")
	}
	return v.Err()
}

func registryTx(tx kv.Tx, id int64) (Registry, bool) {
	var r Registry
	ok := getJSON(tx.Bucket(bktRegistries), itob(id), &r)
	return r, ok
}

// CreateRegistry adds a virtual registry to a top-level group, with the
// defaults of everything else.
func (s *Store) CreateRegistry(group int64, name, description string) (Registry, error) {
	return s.CreateRegistryFrom(group, NewRegistry{Name: name, Description: description})
}

// CreateRegistryFrom adds a virtual registry to a top-level group. A
// subgroup is refused as GitLab's model refuses it, a validation error on
// "group" reported with the others.
func (s *Store) CreateRegistryFrom(group int64, n NewRegistry) (Registry, error) {
	name := n.Name
	now := s.clock()
	r := Registry{GroupID: group, Name: name, Description: n.Description, CreatedAt: now, UpdatedAt: now,
		MetadataMergeOff: n.MergeMetadata != nil && !*n.MergeMetadata}
	err := s.update(false, true, func(tx kv.Tx) error {
		g, ok := groupTx(tx, group)
		if !ok {
			return notFound("Group")
		}
		v := &ValidationError{}
		if !g.TopLevel() {
			v.Add("group", "must be a top level Group")
		}
		var ve *ValidationError
		if errors.As(validRegistry(name, n.Description), &ve) {
			for f, msgs := range ve.Fields {
				for _, msg := range msgs {
					v.Add(f, msg)
				}
			}
		}
		if err := v.Err(); err != nil {
			return err
		}
		existing := registriesOfTx(tx, group)
		if len(existing) >= MaxRegistriesPerGroup {
			return invalid("group", "20 registries is the maximum allowed per group.")
		}
		for _, e := range existing {
			if e.Name == name {
				return invalid("name", "has already been taken")
			}
		}
		b := tx.Bucket(bktRegistries)
		id, err := nextID(b)
		if err != nil {
			return err
		}
		r.ID = id
		if err := putJSON(b, itob(id), r); err != nil {
			return err
		}
		return tx.Bucket(bktGroupRegs).Put(pair(group, id), emptyValue)
	})
	return r, err
}

func registriesOfTx(tx kv.Tx, group int64) []Registry {
	var out []Registry
	for _, id := range childIDs(tx.Bucket(bktGroupRegs), group) {
		if r, ok := registryTx(tx, id); ok {
			out = append(out, r)
		}
	}
	return out
}

// GroupRegistries lists a group's registries by id.
func (s *Store) GroupRegistries(group int64) ([]Registry, error) {
	var out []Registry
	err := s.db.View(func(tx kv.Tx) error {
		if _, ok := groupTx(tx, group); !ok {
			return notFound("Group")
		}
		out = registriesOfTx(tx, group)
		return nil
	})
	return out, err
}

// Registry returns a registry by id.
func (s *Store) Registry(id int64) (Registry, error) {
	var r Registry
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		if r, ok = registryTx(tx, id); !ok {
			return notFound("Registry")
		}
		return nil
	})
	return r, err
}

// RegistryPatch lists the fields an update changes; nil leaves a field alone.
type RegistryPatch struct {
	Name, Description *string
	MergeMetadata     *bool
}

// UpdateRegistry changes a registry's name, description or metadata merge.
func (s *Store) UpdateRegistry(id int64, p RegistryPatch) (Registry, error) {
	var r Registry
	// The merge switch changes how the registry resolves: the proxy's views
	// of it (keyed by CacheGeneration) must reload.
	err := s.update(false, p.MergeMetadata != nil, func(tx kv.Tx) error {
		var ok bool
		if r, ok = registryTx(tx, id); !ok {
			return notFound("Registry")
		}
		if p.Name != nil {
			r.Name = *p.Name
		}
		if p.Description != nil {
			r.Description = *p.Description
		}
		if p.MergeMetadata != nil {
			r.MetadataMergeOff = !*p.MergeMetadata
		}
		if err := validRegistry(r.Name, r.Description); err != nil {
			return err
		}
		if p.Name != nil {
			for _, e := range registriesOfTx(tx, r.GroupID) {
				if e.ID != r.ID && e.Name == r.Name {
					return invalid("name", "has already been taken")
				}
			}
		}
		r.UpdatedAt = s.clock()
		return putJSON(tx.Bucket(bktRegistries), itob(id), r)
	})
	return r, err
}

// ErrPreconditionFailed means the record changed after the time the caller
// said it last saw it (If-Unmodified-Since).
var ErrPreconditionFailed = &ConflictError{Reason: "precondition failed"}

// DeleteRegistry removes a registry, its associations, and every upstream that
// belonged to it alone (with their cache entries, marked for destruction).
// With unmodifiedSince set, a registry updated after that time is not deleted.
func (s *Store) DeleteRegistry(id int64, unmodifiedSince *time.Time) error {
	return s.update(false, true, func(tx kv.Tx) error {
		r, ok := registryTx(tx, id)
		if !ok {
			return notFound("Registry")
		}
		if unmodifiedSince != nil && r.UpdatedAt.Truncate(time.Second).After(*unmodifiedSince) {
			return ErrPreconditionFailed
		}
		for _, a := range assocsOfRegistryTx(tx, id) {
			if err := deleteAssocTx(tx, a); err != nil {
				return err
			}
			if len(childIDs(tx.Bucket(bktUpAssocs), a.UpstreamID)) == 0 {
				if err := deleteUpstreamTx(tx, a.UpstreamID, s.clock()); err != nil {
					return err
				}
			}
		}
		if err := tx.Bucket(bktRegistries).Delete(itob(id)); err != nil {
			return err
		}
		return tx.Bucket(bktGroupRegs).Delete(pair(r.GroupID, id))
	})
}

// exclusiveUpstreams lists the ids of the registry's upstreams that belong to
// no other registry.
func (s *Store) exclusiveUpstreams(registry int64) ([]int64, error) {
	var out []int64
	err := s.db.View(func(tx kv.Tx) error {
		if _, ok := registryTx(tx, registry); !ok {
			return notFound("Registry")
		}
		for _, a := range assocsOfRegistryTx(tx, registry) {
			if len(childIDs(tx.Bucket(bktUpAssocs), a.UpstreamID)) == 1 {
				out = append(out, a.UpstreamID)
			}
		}
		return nil
	})
	return out, err
}
