package store

import (
	"encoding/json"

	"registryd/store/kv"
)

// CatalogRegistry names a registry for the metrics' info series.
type CatalogRegistry struct {
	ID, GroupID int64
	Name        string
}

// CatalogUpstream names an upstream for the metrics' info series.
type CatalogUpstream struct {
	ID, GroupID int64
	Name        string
}

// Catalog is every registry and upstream, by id.
type Catalog struct {
	Registries []CatalogRegistry
	Upstreams  []CatalogUpstream
}

// Catalog lists every registry and upstream (ids, groups and names), in
// one read transaction: the metrics map ids to names with it, and drop the
// series of what no longer exists.
func (s *Store) Catalog() (Catalog, error) {
	var c Catalog
	err := s.db.View(func(tx kv.Tx) error {
		if err := tx.Bucket(bktRegistries).ForEach(func(_, v []byte) error {
			var r Registry
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			c.Registries = append(c.Registries, CatalogRegistry{ID: r.ID, GroupID: r.GroupID, Name: r.Name})
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bktUpstreams).ForEach(func(_, v []byte) error {
			// Decoded into a narrow struct: the sealed password stays sealed.
			var u struct {
				ID      int64  `json:"id"`
				GroupID int64  `json:"group_id"`
				Name    string `json:"name"`
			}
			if err := json.Unmarshal(v, &u); err != nil {
				return err
			}
			c.Upstreams = append(c.Upstreams, CatalogUpstream{ID: u.ID, GroupID: u.GroupID, Name: u.Name})
			return nil
		})
	})
	return c, err
}
