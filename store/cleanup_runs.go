package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"registryd/store/kv"
)

// ErrCleanupRunning refuses to start a run of a policy that is running.
var ErrCleanupRunning = &ConflictError{Reason: "409 Conflict: the cleanup policy is running"}

// ErrCleanupNotDue: the policy is not runnable any more (disabled, running
// or rescheduled since the scheduler looked).
var ErrCleanupNotDue = errors.New("the cleanup policy is not due")

// ErrCleanupNotRunning: the policy has no run in progress (it was deleted,
// or deleted and created again, during the run).
var ErrCleanupNotRunning = errors.New("the cleanup policy has no run in progress")

// CleanupStart says which runs StartCleanupRun may start.
type CleanupStart struct {
	// Due starts the run only if the policy is runnable now (the
	// scheduler's check, repeated in the transaction); else
	// ErrCleanupNotDue.
	Due bool
	// Resume continues the run a policy left "running" (a crash, a stop):
	// its progress and figures are kept. A policy not running gets
	// ErrCleanupNotDue.
	Resume bool
	// AuthorID and AuthorName ask for a manual run (run now): any policy
	// not running, enabled or not.
	AuthorID   int64
	AuthorName string
	// MinInterval, for a manual run: refuse it (*CleanupTooSoonError)
	// when the policy's last run, scheduled or manual, started less than
	// MinInterval ago. 0: no minimum.
	MinInterval time.Duration
}

// CleanupTooSoonError refuses a manual run (run now) that comes less than
// CleanupStart.MinInterval after the start of the policy's last run.
type CleanupTooSoonError struct {
	// Interval is the minimum interval; RetryAfter how long until a run
	// would be accepted (more than 0, at most Interval).
	Interval   time.Duration
	RetryAfter time.Duration
}

func (e *CleanupTooSoonError) Error() string {
	return "the cleanup policy's last run started less than " + e.Interval.String() +
		" ago; a run may start in " + e.RetryAfter.String()
}

// TooSoon returns the error that refuses a manual run of p at now, or nil
// when its last run started at least interval before (see runNowWait).
func (p CleanupPolicy) TooSoon(now time.Time, interval time.Duration) error {
	if wait := p.runNowWait(now, interval); wait > 0 {
		return &CleanupTooSoonError{Interval: interval, RetryAfter: wait}
	}
	return nil
}

// StartCleanupRun marks the policy running (without touching updated_at,
// as GitLab's worker does) and returns it with its run state: the cutoff is
// now minus keep_n_days_after_download. A running policy gets
// ErrCleanupRunning, unless Resume; then a manual run within
// how.MinInterval of the last run's start gets a *CleanupTooSoonError.
func (s *Store) StartCleanupRun(group int64, how CleanupStart) (CleanupPolicy, error) {
	var c CleanupPolicy
	err := s.update(false, false, func(tx kv.Tx) error {
		var ok bool
		if c, ok = cleanupPolicyTx(tx, group); !ok {
			return notFound("Cleanup policy")
		}
		now := s.clock()
		switch {
		case how.Resume:
			if c.Status != CleanupRunning {
				return ErrCleanupNotDue
			}
			if c.Run != nil {
				c.Run.Resumed++
				return putCleanupPolicyTx(tx, c)
			}
			// Running without a run state: not written by this store,
			// but started afresh rather than left stuck.
		case c.Status == CleanupRunning:
			return ErrCleanupRunning
		case how.Due && !c.Runnable(now):
			return ErrCleanupNotDue
		case !how.Due:
			if err := c.TooSoon(now, how.MinInterval); err != nil {
				return err
			}
		}
		c.Status = CleanupRunning
		c.Run = &CleanupRun{StartedAt: now, Cutoff: now.Add(-cadenceDays(c.KeepNDaysAfterDownload)),
			Manual: !how.Due && !how.Resume, AuthorID: how.AuthorID, AuthorName: how.AuthorName}
		return putCleanupPolicyTx(tx, c)
	})
	if err != nil {
		return CleanupPolicy{}, err
	}
	return c, nil
}

// CleanupBatch is what one batch of a run deleted.
type CleanupBatch struct {
	Entries int
	Bytes   int64
	// Done: the walk reached the end of the group's entries.
	Done bool
	// Run is the run's state after the batch.
	Run CleanupRun
}

// cleanupScanFactor bounds the cache entries one batch visits, as a
// multiple of those it may delete: a group whose entries are mostly kept
// must not make one transaction walk all of them.
const cleanupScanFactor = 4

// CleanupRunBatch deletes, in one transaction, up to limit entries of the
// policy's run that were last downloaded (or created, when never
// downloaded) before the run's cutoff, visiting at most
// cleanupScanFactor*limit entries, and commits the run's progress with them.
// Deleting is marking for destruction, as DeleteCacheEntry does: the
// entries are absent from the commit on, and the collector (woken by the
// commit) removes them and their blobs. A policy with no run in progress
// gets ErrCleanupNotRunning, a deleted one a not-found error.
//
// The walk covers the key ranges of the group's upstreams only (entries
// are keyed by upstream id and path), never the rest of the cache.
func (s *Store) CleanupRunBatch(group int64, limit int) (CleanupBatch, error) {
	var out CleanupBatch
	limit = max(limit, 1)
	// Not s.update(…, cache=true): a batch that deleted nothing (the last
	// one, or one over entries that are all kept) must not move the cache
	// generation, which would make the proxy reload its views for nothing.
	err := s.db.Update(func(tx kv.Tx) error {
		out = CleanupBatch{} // kv may run the function again: out's counts are written into the run
		c, ok := cleanupPolicyTx(tx, group)
		if !ok {
			return notFound("Cleanup policy")
		}
		if c.Status != CleanupRunning || c.Run == nil {
			return ErrCleanupNotRunning
		}
		run := c.Run
		victims, next, err := cleanupWalkTx(tx, group, run.Cutoff, run.Next, limit, cleanupScanFactor*limit)
		if err != nil {
			return err
		}
		now := s.clock()
		for _, v := range victims {
			if err := markPendingTx(tx, v.key, v.e, now); err != nil {
				return err
			}
			out.Entries++
			out.Bytes += v.e.Size
		}
		run.Next = next
		run.DeletedEntries += int64(out.Entries)
		run.DeletedSize += out.Bytes
		out.Done = next == nil
		out.Run = *run
		return putCleanupPolicyTx(tx, c)
	})
	if err != nil {
		return CleanupBatch{}, err
	}
	if out.Entries > 0 {
		// What update does after a commit that marked entries: readers'
		// views of the cache are stale, and the collector has work.
		s.committed(false, true, true)
	}
	return out, nil
}

type cleanupVictim struct {
	key []byte
	e   CacheEntry
}

// cleanupProbe is the part of a cache entry record that selecting entries
// reads. Decoding only these fields skips allocating every string of the
// record (path, digests, content type): most entries a walk visits are
// only looked at.
type cleanupProbe struct {
	Size         int64      `json:"size"`
	CreatedAt    time.Time  `json:"created_at"`
	DownloadedAt *time.Time `json:"downloaded_at"`
	PurgeEpoch   uint64     `json:"purge_epoch"`
}

// old reports whether the entry was last used before cutoff: its last
// download, or its creation when it was never downloaded. Strictly before,
// as GitLab's requiring_cleanup (downloaded_at < now - n days).
func (p *cleanupProbe) old(cutoff time.Time) bool {
	last := p.CreatedAt
	if p.DownloadedAt != nil {
		last = *p.DownloadedAt
	}
	return last.Before(cutoff)
}

// cleanupWalkTx walks the live entries of the group's upstreams from the
// key from (nil: the start), in key order (upstream id, then path), and
// returns up to limit of those older than cutoff, visiting at most visits
// entries. next is the key to resume at, nil when the walk reached the end.
// Entries of a purge in progress are already absent and are skipped.
func cleanupWalkTx(tx kv.Tx, group int64, cutoff time.Time, from []byte, limit, visits int) (victims []cleanupVictim, next []byte, err error) {
	entries := tx.Bucket(bktCacheEntries)
	for _, up := range childIDs(tx.Bucket(bktGroupUpstreams), group) {
		prefix := itob(up)
		seek := prefix
		if from != nil {
			switch c := bytes.Compare(prefix, from[:min(8, len(from))]); {
			case c < 0:
				continue // walked already
			case c == 0:
				seek = from
			}
		}
		epoch := purgeEpochTx(tx, up)
		cur := entries.Cursor()
		for k, v := cur.Seek(seek); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
			if len(victims) == limit || visits == 0 {
				return victims, slices.Clone(k), nil
			}
			visits--
			var p cleanupProbe
			if err := json.Unmarshal(v, &p); err != nil {
				return nil, nil, err
			}
			if p.PurgeEpoch < epoch || !p.old(cutoff) {
				continue
			}
			var e CacheEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return nil, nil, err
			}
			victims = append(victims, cleanupVictim{key: slices.Clone(k), e: e})
		}
	}
	return victims, nil, nil
}

// FinishCleanupRun ends the policy's run and returns the policy and the run
// it ended. With failure "" the run succeeded: its figures become the
// policy's last run figures and the status "scheduled". Otherwise the status
// is "failed" with failure as the message (cut at 255 characters, as
// GitLab's), and the last run figures stay those of the previous success, as
// in GitLab. Either way last_run_at is now and the next run is due Cadence
// days later (GitLab's schedule_next_run!).
func (s *Store) FinishCleanupRun(group int64, failure string) (CleanupPolicy, CleanupRun, error) {
	var c CleanupPolicy
	var run CleanupRun
	err := s.update(false, false, func(tx kv.Tx) error {
		var ok bool
		if c, ok = cleanupPolicyTx(tx, group); !ok {
			return notFound("Cleanup policy")
		}
		if c.Status != CleanupRunning || c.Run == nil {
			return ErrCleanupNotRunning
		}
		run = *c.Run
		now := s.clock()
		c.Run = nil
		c.LastRunAt = &now
		c.LastRunStartedAt = &run.StartedAt
		c.NextRunAt = now.Add(cadenceDays(c.Cadence))
		c.UpdatedAt = now
		if failure == "" {
			c.Status = CleanupScheduled
			c.FailureMessage = ""
			c.LastRunDeletedEntriesCount = run.DeletedEntries
			c.LastRunDeletedSize = run.DeletedSize
			c.LastRunDetailedMetrics = map[string]CleanupMetrics{
				cleanupPackageMaven: {DeletedEntriesCount: run.DeletedEntries, DeletedSize: run.DeletedSize}}
		} else {
			c.Status = CleanupFailed
			c.FailureMessage = truncateAudit(failure, MaxCleanupFailureMessage)
		}
		return putCleanupPolicyTx(tx, c)
	})
	if err != nil {
		return CleanupPolicy{}, CleanupRun{}, err
	}
	return c, run, nil
}

// CleanupPreview is what a run would delete now.
type CleanupPreview struct {
	// Cutoff: the entries last downloaded (or, never downloaded, created)
	// before it would go.
	Cutoff time.Time
	Count  int
	Bytes  int64
	// Page is the requested page of those entries, in the order a run
	// visits them (upstream id, then relative path).
	Page []CacheEntry
}

// CleanupCandidates lists what a run keeping keepDays days would delete of
// the group's cache now, without deleting anything: every entry of the
// group's upstreams is read once, in one read transaction (which blocks no
// writer).
func (s *Store) CleanupCandidates(group int64, keepDays, offset, limit int) (CleanupPreview, error) {
	out := CleanupPreview{Cutoff: s.clock().Add(-cadenceDays(keepDays))}
	err := s.db.View(func(tx kv.Tx) error {
		if _, ok := groupTx(tx, group); !ok {
			return notFound("Group")
		}
		entries := tx.Bucket(bktCacheEntries)
		for _, up := range childIDs(tx.Bucket(bktGroupUpstreams), group) {
			prefix := itob(up)
			epoch := purgeEpochTx(tx, up)
			cur := entries.Cursor()
			for k, v := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
				var p cleanupProbe
				if err := json.Unmarshal(v, &p); err != nil {
					return err
				}
				if p.PurgeEpoch < epoch || !p.old(out.Cutoff) {
					continue
				}
				if out.Count >= offset && len(out.Page) < limit {
					var e CacheEntry
					if err := json.Unmarshal(v, &e); err != nil {
						return err
					}
					out.Page = append(out.Page, e)
				}
				out.Count++
				out.Bytes += p.Size
			}
		}
		return nil
	})
	if err != nil {
		return CleanupPreview{}, err
	}
	return out, nil
}
