package store

import (
	"registryd/store/kv"
)

// PutCacheEntries writes many new entries in one transaction: for imports
// and for the scale benchmark, where a transaction per entry would spend its
// time in fsync. Existing entries for the same paths are replaced as
// PutCacheEntry does.
func (s *Store) PutCacheEntries(entries []CacheEntry) error {
	now := s.clock()
	return s.update(false, true, func(tx kv.Tx) error {
		for _, e := range entries {
			if err := putCacheEntryTx(tx, &e, now); err != nil {
				return err
			}
		}
		return nil
	})
}
