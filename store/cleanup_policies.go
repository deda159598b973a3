package store

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"registryd/store/kv"
)

// Cleanup policies, GitLab's VirtualRegistries::Cleanup::Policy: one per
// top-level group, saying how long a cache entry of the group's upstreams is
// kept after its last download and how often that is enforced. A run
// (scheduled by package cleanup, or asked for by an admin) marks the old
// entries for destruction in small transactions, exactly as deleting them
// one by one would (markPendingTx), so the proxy's collector removes them
// and their blobs; the policy records the run's figures.
//
// A run's progress lives in the policy record (CleanupPolicy.Run): where the
// walk of the group's cache entries resumes and what it has deleted so far,
// committed with each batch. A run cut short (a crash, a stop) leaves the
// policy "running" with that state, and the scheduler resumes it where the
// last committed batch left off, so its figures are exact however often it
// was interrupted.

// Policy statuses (GitLab's enum).
const (
	CleanupScheduled = "scheduled"
	CleanupRunning   = "running"
	CleanupFailed    = "failed"
)

// CleanupCadences are the days between runs a policy may have (GitLab's
// CADENCES: daily, weekly, every two weeks, monthly, quarterly).
var CleanupCadences = []int{1, 7, 14, 30, 90}

// Limits and defaults of a policy, GitLab's (column defaults and model
// validations).
const (
	DefaultCleanupKeepDays   = 30
	DefaultCleanupCadence    = 7
	MaxCleanupKeepDays       = 365
	MaxCleanupFailureMessage = 255
)

// cleanupPackageMaven is the key of the Maven figures in a run's detailed
// metrics (GitLab keys them by package format).
const cleanupPackageMaven = "maven"

// CleanupMetrics are what a run deleted of one package format.
type CleanupMetrics struct {
	DeletedEntriesCount int64 `json:"deleted_entries_count"`
	DeletedSize         int64 `json:"deleted_size"`
}

// CleanupPolicy is a group's cleanup policy.
type CleanupPolicy struct {
	GroupID                int64  `json:"group_id"`
	Enabled                bool   `json:"enabled"`
	KeepNDaysAfterDownload int    `json:"keep_n_days_after_download"`
	Cadence                int    `json:"cadence"`
	NotifyOnSuccess        bool   `json:"notify_on_success"`
	NotifyOnFailure        bool   `json:"notify_on_failure"`
	Status                 string `json:"status"`
	// NextRunAt is set by every save, to the save's time plus Cadence days
	// (GitLab's before_save :set_next_run_at), and by the end of a run.
	NextRunAt                  time.Time                 `json:"next_run_at"`
	LastRunAt                  *time.Time                `json:"last_run_at,omitempty"`
	LastRunDeletedSize         int64                     `json:"last_run_deleted_size"`
	LastRunDeletedEntriesCount int64                     `json:"last_run_deleted_entries_count"`
	LastRunDetailedMetrics     map[string]CleanupMetrics `json:"last_run_detailed_metrics,omitempty"`
	FailureMessage             string                    `json:"failure_message,omitempty"`
	CreatedAt                  time.Time                 `json:"created_at"`
	UpdatedAt                  time.Time                 `json:"updated_at"`
	// LastRunStartedAt is when the run that ended at LastRunAt started.
	// Internal, as Run: the API does not show it; the minimum interval
	// between manual runs (CleanupStart.MinInterval) counts from it.
	LastRunStartedAt *time.Time `json:"last_run_started_at,omitempty"`
	// Run is the run in progress (Status running), nil otherwise. Internal
	// to the store and the scheduler; the API does not show it.
	Run *CleanupRun `json:"run,omitempty"`
}

// CleanupRun is the state of a run in progress, committed with each batch.
type CleanupRun struct {
	StartedAt time.Time `json:"started_at"`
	// Cutoff: entries last downloaded (or, never downloaded, created)
	// before it go. Fixed when the run starts, so a resumed run deletes
	// what the run it continues would have.
	Cutoff time.Time `json:"cutoff"`
	// Manual is a run asked for through the API (run now), by AuthorID
	// (AuthorName); a scheduled run has no author.
	Manual     bool   `json:"manual,omitempty"`
	AuthorID   int64  `json:"author_id,omitempty"`
	AuthorName string `json:"author_name,omitempty"`
	// Next is the cache_entries key the walk resumes at; nil: from the
	// first entry of the group's first upstream.
	Next []byte `json:"next,omitempty"`
	// Figures so far.
	DeletedEntries int64 `json:"deleted_entries"`
	DeletedSize    int64 `json:"deleted_size"`
	// Resumed counts how often the run was resumed after an interruption.
	Resumed int `json:"resumed,omitempty"`
}

// Runnable reports whether the scheduler runs the policy at now: GitLab's
// runnable_schedules (enabled, scheduled or failed, next_run_at before now).
func (p CleanupPolicy) Runnable(now time.Time) bool {
	return p.Enabled && p.Status != CleanupRunning && p.NextRunAt.Before(now)
}

// lastRunStart is when the policy's last run started: the run in
// progress's start, else the last ended run's (LastRunStartedAt; for a run
// that ended before registryd recorded starts, LastRunAt, its end). Zero
// when the policy never ran.
func (p CleanupPolicy) lastRunStart() time.Time {
	switch {
	case p.Run != nil:
		return p.Run.StartedAt
	case p.LastRunStartedAt != nil:
		return *p.LastRunStartedAt
	case p.LastRunAt != nil:
		return *p.LastRunAt
	}
	return time.Time{}
}

// runNowWait is how long, at now, a manual run of the policy must still
// wait when manual runs are at least interval apart, counted from the last
// run's start (lastRunStart): 0 when it may start. It is at most interval,
// even when the last start is after now (a clock set back).
func (p CleanupPolicy) runNowWait(now time.Time, interval time.Duration) time.Duration {
	last := p.lastRunStart()
	if interval <= 0 || last.IsZero() {
		return 0
	}
	return min(max(last.Add(interval).Sub(now), 0), interval)
}

// CleanupPolicyPatch is the input of CreateCleanupPolicy (nil fields take
// their defaults) and UpdateCleanupPolicy (nil fields stay).
type CleanupPolicyPatch struct {
	Enabled                *bool
	KeepNDaysAfterDownload *int
	Cadence                *int
	NotifyOnSuccess        *bool
	NotifyOnFailure        *bool
}

func (p CleanupPolicyPatch) apply(c *CleanupPolicy) {
	if p.Enabled != nil {
		c.Enabled = *p.Enabled
	}
	if p.KeepNDaysAfterDownload != nil {
		c.KeepNDaysAfterDownload = *p.KeepNDaysAfterDownload
	}
	if p.Cadence != nil {
		c.Cadence = *p.Cadence
	}
	if p.NotifyOnSuccess != nil {
		c.NotifyOnSuccess = *p.NotifyOnSuccess
	}
	if p.NotifyOnFailure != nil {
		c.NotifyOnFailure = *p.NotifyOnFailure
	}
}

func validCleanupPolicy(c CleanupPolicy) error {
	v := &ValidationError{}
	switch {
	case c.KeepNDaysAfterDownload < 1:
		v.Add("keep_n_days_after_download", "must be greater than 0")
	case c.KeepNDaysAfterDownload > MaxCleanupKeepDays:
		v.Add("keep_n_days_after_download", "must be less than or equal to 365")
	}
	if !slices.Contains(CleanupCadences, c.Cadence) {
		v.Add("cadence", "is not included in the list")
	}
	return v.Err()
}

// cadenceDays is a number of days as a duration: days of 24 hours, as
// Rails' n.days is in UTC.
func cadenceDays(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }

func cleanupPolicyTx(tx kv.Tx, group int64) (CleanupPolicy, bool) {
	var c CleanupPolicy
	ok := getJSON(tx.Bucket(bktCleanupPolicies), itob(group), &c)
	return c, ok
}

func putCleanupPolicyTx(tx kv.Tx, c CleanupPolicy) error {
	return putJSON(tx.Bucket(bktCleanupPolicies), itob(c.GroupID), c)
}

// CreateCleanupPolicy creates the policy of a top-level group. Fields not
// given take GitLab's defaults (disabled, 30 days, weekly, no
// notifications); the first run is due Cadence days from now.
func (s *Store) CreateCleanupPolicy(group int64, p CleanupPolicyPatch) (CleanupPolicy, error) {
	now := s.clock()
	c := CleanupPolicy{GroupID: group, KeepNDaysAfterDownload: DefaultCleanupKeepDays, Cadence: DefaultCleanupCadence,
		Status: CleanupScheduled, CreatedAt: now, UpdatedAt: now}
	p.apply(&c)
	c.NextRunAt = now.Add(cadenceDays(c.Cadence))
	err := s.update(false, false, func(tx kv.Tx) error {
		g, ok := groupTx(tx, group)
		if !ok {
			return notFound("Group")
		}
		v := &ValidationError{}
		if !g.TopLevel() {
			v.Add("group", "must be a top level Group")
		}
		if _, taken := cleanupPolicyTx(tx, group); taken {
			v.Add("group", "has already been taken")
		}
		var ve *ValidationError
		if errors.As(validCleanupPolicy(c), &ve) {
			for f, msgs := range ve.Fields {
				for _, m := range msgs {
					v.Add(f, m)
				}
			}
		}
		if err := v.Err(); err != nil {
			return err
		}
		return putCleanupPolicyTx(tx, c)
	})
	if err != nil {
		return CleanupPolicy{}, err
	}
	return c, nil
}

// CleanupPolicy returns the group's policy.
func (s *Store) CleanupPolicy(group int64) (CleanupPolicy, error) {
	var c CleanupPolicy
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		if c, ok = cleanupPolicyTx(tx, group); !ok {
			return notFound("Cleanup policy")
		}
		return nil
	})
	return c, err
}

// CleanupPolicies returns every policy, in group id order (one per
// top-level group: a short list).
func (s *Store) CleanupPolicies() ([]CleanupPolicy, error) {
	var out []CleanupPolicy
	err := s.db.View(func(tx kv.Tx) error {
		return tx.Bucket(bktCleanupPolicies).ForEach(func(_, v []byte) error {
			var c CleanupPolicy
			if err := json.Unmarshal(v, &c); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// UpdateCleanupPolicy changes the given fields. As every save of GitLab's
// model, it moves next_run_at to now plus the cadence, whatever changed. A
// run in progress goes on with the settings it started with.
func (s *Store) UpdateCleanupPolicy(group int64, p CleanupPolicyPatch) (CleanupPolicy, error) {
	var c CleanupPolicy
	err := s.update(false, false, func(tx kv.Tx) error {
		var ok bool
		if c, ok = cleanupPolicyTx(tx, group); !ok {
			return notFound("Cleanup policy")
		}
		p.apply(&c)
		if err := validCleanupPolicy(c); err != nil {
			return err
		}
		now := s.clock()
		c.UpdatedAt = now
		c.NextRunAt = now.Add(cadenceDays(c.Cadence))
		return putCleanupPolicyTx(tx, c)
	})
	if err != nil {
		return CleanupPolicy{}, err
	}
	return c, nil
}

// DeleteCleanupPolicy removes the group's policy. With unmodifiedSince set,
// a policy updated after that time is not deleted (ErrPreconditionFailed). A
// run in progress stops at its next batch; what it deleted stays deleted.
func (s *Store) DeleteCleanupPolicy(group int64, unmodifiedSince *time.Time) error {
	return s.update(false, false, func(tx kv.Tx) error {
		c, ok := cleanupPolicyTx(tx, group)
		if !ok {
			return notFound("Cleanup policy")
		}
		if unmodifiedSince != nil && c.UpdatedAt.Truncate(time.Second).After(*unmodifiedSince) {
			return ErrPreconditionFailed
		}
		return tx.Bucket(bktCleanupPolicies).Delete(itob(group))
	})
}
