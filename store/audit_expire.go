package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"registryd/store/kv"
)

// ExpireAuditEvents deletes, in one transaction, at most limit audit events
// created before cutoff, oldest first, with their index entries and their
// share of the counters, and reports how many it deleted and whether older
// events than cutoff remain (another call deletes the next batch).
//
// The walk is the time index from its start, so a batch reads only what it
// deletes. Small batches keep the write transaction short: the proxy's
// audit writer and every other writer wait for it. Freed pages are reused
// by later writes (bbolt's freelist; PostgreSQL's vacuum), so a database
// under retention stops growing once the oldest kept events are as old as
// the retention; neither file shrinks.
func (s *Store) ExpireAuditEvents(cutoff time.Time, limit int) (deleted int, more bool, err error) {
	ms := cutoff.UnixMilli()
	if limit <= 0 || ms <= 0 {
		return 0, false, nil
	}
	err = s.update(false, false, func(tx kv.Tx) error {
		deleted, more = 0, false // the function may run again (kv.DB)
		events, byTime, byType, byEntity := tx.Bucket(bktAudit), tx.Bucket(bktAuditByTime),
			tx.Bucket(bktAuditByType), tx.Bucket(bktAuditByEntity)
		var keys [][]byte
		c := byTime.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) != 16 || int64(binary.BigEndian.Uint64(k)) >= ms {
				break
			}
			if len(keys) == limit {
				more = true
				break
			}
			keys = append(keys, bytes.Clone(k))
		}
		delta := map[string]int64{}
		for _, k := range keys {
			id := btoi(k[8:])
			code, entity, err := auditScope(id, events.Get(itob(id)))
			if err != nil {
				return fmt.Errorf("expiring audit events: %w", err)
			}
			for _, del := range []struct {
				b   kv.Bucket
				key []byte
			}{{events, itob(id)}, {byTime, k}, {byType, append(auditTypePrefix(code), k...)},
				{byEntity, append(auditEntityPrefix(code, entity), k...)}} {
				if err := del.b.Delete(del.key); err != nil {
					return err
				}
			}
			for _, ck := range auditCountKeys(code, entity) {
				delta[string(ck)]--
			}
		}
		if err := addAuditCounts(tx.Bucket(bktAuditCounts), delta); err != nil {
			return err
		}
		deleted = len(keys)
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return deleted, more, nil
}
