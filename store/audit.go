package store

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"registryd/store/kv"
)

// AuditEvent is one audit record in the shape of GitLab's audit events: who
// (the author) did what (EventName, Message) to what (the target) within
// which scope (the entity). Audit events are not activity events (events.go):
// they answer "who was refused or changed what", for administrators and
// group owners, and are kept for audit.retention (ExpireAuditEvents).
type AuditEvent struct {
	ID        int64
	EventName string
	// AuthorID is the user who acted, or one of GitLab's ids for authors who
	// are not users: AuditAuthorUnauthenticated (-1), AuditAuthorDeployToken
	// (-2). 0 is no author at all (registryd itself).
	AuthorID    int64
	AuthorName  string
	AuthorClass string // AuditAuthorClassUser, AuditAuthorClassDeployToken, ...
	// EntityType and EntityID are the scope that lists the event: a group's
	// events are those with EntityType "Group" and EntityID the group's id.
	EntityID      int64
	EntityType    string // AuditEntityGroup, AuditEntityProject, AuditEntityUser, AuditEntityInstance
	EntityPath    string // the entity's full path when the event was recorded
	TargetID      int64  // 0: none
	TargetType    string // a class name, e.g. AuditTargetMavenUpstream
	TargetDetails string
	Message       string // GitLab's custom_message
	IPAddress     string
	CreatedAt     time.Time // set by the store clock when zero

	// Count makes the event an aggregate: it stands for Count occurrences
	// (refusals past the audit rate limits) between FirstAt and CreatedAt,
	// the first of which concerned FirstDetails and the last LastDetails
	// (what TargetDetails says of a single event). 0 is an event that
	// stands for itself; the other three are then empty.
	Count        int64
	FirstAt      time.Time // set to CreatedAt when zero
	FirstDetails string
	LastDetails  string
}

// Entity types, GitLab's class names (AuditEventFinder::VALID_ENTITY_TYPES).
const (
	AuditEntityUser     = "User"
	AuditEntityGroup    = "Group"
	AuditEntityProject  = "Project"
	AuditEntityInstance = "Gitlab::Audit::InstanceScope"
)

// AuditEntityTypes are the entity types in code order (the code is what the
// indexes store: position + 1).
var AuditEntityTypes = []string{AuditEntityUser, AuditEntityGroup, AuditEntityProject, AuditEntityInstance}

func auditEntityCode(t string) byte {
	for i, x := range AuditEntityTypes {
		if x == t {
			return byte(i + 1)
		}
	}
	return 0
}

// Authors who are not users, with GitLab's ids and class names
// (Gitlab::Audit::UnauthenticatedAuthor, AuditEvents::BuildService: a
// deploy token author gets id -2 and its own name).
const (
	AuditAuthorUnauthenticated int64 = -1
	AuditAuthorDeployToken     int64 = -2

	AuditAuthorClassUser            = "User"
	AuditAuthorClassDeployToken     = "DeployToken"
	AuditAuthorClassUnauthenticated = "Gitlab::Audit::UnauthenticatedAuthor"
)

// Event names and target types registryd records.
const (
	// AuditUpstreamArtifactDenied: an upstream's allow/deny rules refused a
	// file (scope: the registry's group; target: the upstream).
	AuditUpstreamArtifactDenied = "virtual_registries_packages_maven_upstream_artifact_denied"
	// AuditTargetMavenUpstream is GitLab's class name of a Maven upstream.
	AuditTargetMavenUpstream = "VirtualRegistries::Packages::Maven::Upstream"
	// AuditCleanupPolicyRun: a cleanup policy run ended, with its figures
	// (scope: the policy's group; target: the policy).
	AuditCleanupPolicyRun = "virtual_registries_cleanup_policy_run"
	// AuditTargetCleanupPolicy is GitLab's class name of a cleanup policy.
	AuditTargetCleanupPolicy = "VirtualRegistries::Cleanup::Policy"
)

// Length limits. Longer values are cut (never refused: a producer must not
// lose an event over a long detail). GitLab cuts entity_path and
// target_details at 5,500 characters; the short fields are names.
const (
	maxAuditShort  = 255  // event name, author name and class, target type, IP address
	maxAuditDetail = 5500 // entity path, target details, message
)

// auditRecordVersion leads every stored record, so that a later layout can
// be told apart from this one.
const auditRecordVersion = 1

// The fixed part of a record, after the version byte: created_at (Unix ms),
// author id, entity id, target id, entity type code.
const auditFixedLen = 1 + 8 + 8 + 8 + 8 + 1

// encodeAuditEvent is the stored record: the fixed part, then the strings,
// each a uvarint length and its bytes, in a fixed order. It is about 40 %
// smaller than the same event as JSON, which matters for records kept for
// years.
//
// An aggregate (Count > 0) goes on after the strings: Count and FirstAt
// (Unix ms) as uvarints, then FirstDetails and LastDetails as strings. A
// single event ends after the strings, as every record did before
// aggregates, and a registryd from before them reads an aggregate as the
// single event of its last refusal (it ignores what follows the strings):
// going back needs no change to the records.
func encodeAuditEvent(e *AuditEvent) []byte {
	strs := e.strings()
	n := auditFixedLen
	for _, s := range strs {
		n += binary.MaxVarintLen32 + len(*s)
	}
	if e.Count > 0 {
		n += 2*binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 + len(e.FirstDetails) + len(e.LastDetails)
	}
	b := make([]byte, auditFixedLen, n)
	b[0] = auditRecordVersion
	binary.BigEndian.PutUint64(b[1:], uint64(e.CreatedAt.UnixMilli()))
	binary.BigEndian.PutUint64(b[9:], uint64(e.AuthorID))
	binary.BigEndian.PutUint64(b[17:], uint64(e.EntityID))
	binary.BigEndian.PutUint64(b[25:], uint64(e.TargetID))
	b[33] = auditEntityCode(e.EntityType)
	for _, s := range strs {
		b = appendAuditString(b, *s)
	}
	if e.Count > 0 {
		b = binary.AppendUvarint(b, uint64(e.Count))
		b = binary.AppendUvarint(b, uint64(e.FirstAt.UnixMilli()))
		b = appendAuditString(b, e.FirstDetails)
		b = appendAuditString(b, e.LastDetails)
	}
	return b
}

func appendAuditString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// strings are the string fields in their stored order. New fields go at
// the end; a record that ends early leaves them empty.
func (e *AuditEvent) strings() []*string {
	return []*string{&e.EventName, &e.AuthorName, &e.AuthorClass, &e.EntityPath, &e.TargetType,
		&e.TargetDetails, &e.Message, &e.IPAddress}
}

func decodeAuditEvent(id int64, v []byte, e *AuditEvent) error {
	code, entity, err := auditScope(id, v)
	if err != nil {
		return err
	}
	*e = AuditEvent{ID: id, CreatedAt: time.UnixMilli(int64(binary.BigEndian.Uint64(v[1:]))).UTC(),
		AuthorID: int64(binary.BigEndian.Uint64(v[9:])), EntityID: entity,
		TargetID: int64(binary.BigEndian.Uint64(v[25:])), EntityType: AuditEntityTypes[code-1]}
	r := auditReader{rest: v[auditFixedLen:]}
	for _, s := range e.strings() {
		if len(r.rest) == 0 {
			return nil
		}
		*s = r.string()
	}
	if len(r.rest) > 0 {
		e.Count = int64(r.uvarint())
		e.FirstAt = time.UnixMilli(int64(r.uvarint())).UTC()
		e.FirstDetails, e.LastDetails = r.string(), r.string()
		if e.Count <= 0 {
			r.bad = true
		}
	}
	if r.bad {
		return fmt.Errorf("store: corrupt audit event %d", id)
	}
	return nil
}

// auditReader reads the variable part of a record; a read past its end
// sets bad and returns zero values.
type auditReader struct {
	rest []byte
	bad  bool
}

func (r *auditReader) uvarint() uint64 {
	n, k := binary.Uvarint(r.rest)
	if k <= 0 {
		r.bad, r.rest = true, nil
		return 0
	}
	r.rest = r.rest[k:]
	return n
}

func (r *auditReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.rest)) {
		r.bad, r.rest = true, nil
		return ""
	}
	s := string(r.rest[:n])
	r.rest = r.rest[n:]
	return s
}

// auditScope reads the entity type code and the entity id of a stored
// record, which its index keys are made of.
func auditScope(id int64, v []byte) (code byte, entity int64, err error) {
	if len(v) < auditFixedLen || v[0] != auditRecordVersion || v[33] == 0 || int(v[33]) > len(AuditEntityTypes) {
		return 0, 0, fmt.Errorf("store: corrupt audit event %d (%d bytes)", id, len(v))
	}
	return v[33], int64(binary.BigEndian.Uint64(v[17:])), nil
}

// Index keys. Every index orders one scope's events by (created_at, id), so
// that newest first is a backward walk and a date range is one key range;
// every index value is the author id, so the group list of a user who may
// see only their own events filters without reading records.
//
//	audit_by_time:   created ms + id
//	audit_by_type:   type code + created ms + id
//	audit_by_entity: type code + entity id + created ms + id
func auditTimeKey(prefix []byte, ms, id int64) []byte {
	k := make([]byte, len(prefix)+16)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], uint64(ms))
	binary.BigEndian.PutUint64(k[len(prefix)+8:], uint64(id))
	return k
}

func auditTypePrefix(code byte) []byte { return []byte{code} }

func auditEntityPrefix(code byte, entity int64) []byte {
	p := make([]byte, 9)
	p[0] = code
	binary.BigEndian.PutUint64(p[1:], uint64(entity))
	return p
}

// Keys of audit_counts: how many events each scope holds, so that the
// total of an unfiltered page costs no scan.
//
//	'g'                   -> all events
//	't' type code         -> events of one entity type
//	'e' type code entity  -> events of one entity
func auditCountKeys(code byte, entity int64) [3][]byte {
	return [3][]byte{{'g'}, {'t', code}, append([]byte{'e'}, auditEntityPrefix(code, entity)...)}
}

// truncateAudit keeps s valid UTF-8 and at most max characters; a cut value
// ends with "..." as GitLab's String#truncate does.
func truncateAudit(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max || utf8.RuneCountInString(s) <= max {
		return s
	}
	cut, n := 0, 0
	for i := range s {
		if n == max-3 {
			cut = i
			break
		}
		n++
	}
	return s[:cut] + "..."
}

// prepareAudit fills defaults and cuts long strings; it reports only what a
// producer cannot have meant (no event name, an unknown entity type, no
// entity, an impossible time), into v under prefix.
func prepareAudit(e *AuditEvent, now time.Time, prefix string, v *ValidationError) {
	switch {
	case strings.TrimSpace(e.EventName) == "":
		v.Add(prefix+"event_name", "is missing")
	case len(e.EventName) > maxAuditShort:
		e.EventName = truncateAudit(e.EventName, maxAuditShort)
	}
	if auditEntityCode(e.EntityType) == 0 {
		v.Add(prefix+"entity_type", "does not have a valid value")
	}
	if e.EntityID < 1 {
		v.Add(prefix+"entity_id", "must be greater than 0")
	}
	if e.TargetID < 0 {
		v.Add(prefix+"target_id", "must be greater than or equal to 0")
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = now
	}
	e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Millisecond)
	if y := e.CreatedAt.Year(); y < 1970 || y > 9999 {
		v.Add(prefix+"created_at", "is invalid")
	}
	switch {
	case e.Count < 0:
		v.Add(prefix+"count", "must be greater than or equal to 0")
	case e.Count == 0:
		e.FirstAt, e.FirstDetails, e.LastDetails = time.Time{}, "", ""
	default:
		if e.FirstAt.IsZero() {
			e.FirstAt = e.CreatedAt
		}
		e.FirstAt = e.FirstAt.UTC().Truncate(time.Millisecond)
		if e.FirstAt.Year() < 1970 || e.FirstAt.After(e.CreatedAt) {
			v.Add(prefix+"first_at", "must not be after created_at")
		}
	}
	switch e.AuthorID {
	case AuditAuthorUnauthenticated:
		if e.AuthorName == "" {
			e.AuthorName = "An unauthenticated user"
		}
		if e.AuthorClass == "" {
			e.AuthorClass = AuditAuthorClassUnauthenticated
		}
	case AuditAuthorDeployToken:
		if e.AuthorName == "" {
			e.AuthorName = "Deploy Token"
		}
		if e.AuthorClass == "" {
			e.AuthorClass = AuditAuthorClassDeployToken
		}
	}
	for _, f := range []struct {
		s   *string
		max int
	}{{&e.AuthorName, maxAuditShort}, {&e.AuthorClass, maxAuditShort}, {&e.TargetType, maxAuditShort},
		{&e.IPAddress, maxAuditShort}, {&e.EntityPath, maxAuditDetail}, {&e.TargetDetails, maxAuditDetail},
		{&e.Message, maxAuditDetail}, {&e.FirstDetails, maxAuditDetail}, {&e.LastDetails, maxAuditDetail}} {
		*f.s = truncateAudit(*f.s, f.max)
	}
}

// RecordAudit appends evs in one transaction, assigning ids in the order of
// evs, and returns them with their ids and stored values. Long strings are
// cut; an event without a name, an entity type or an entity id fails the
// whole batch with a *ValidationError (a producer's bug, found by its tests).
// The write changes neither access decisions nor the cache.
func (s *Store) RecordAudit(evs ...AuditEvent) ([]AuditEvent, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	out := make([]AuditEvent, len(evs))
	copy(out, evs)
	now := s.clock()
	v := &ValidationError{}
	for i := range out {
		prefix := ""
		if len(out) > 1 {
			prefix = "audit_events[" + strconv.Itoa(i) + "]."
		}
		prepareAudit(&out[i], now, prefix, v)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	err := s.update(false, false, func(tx kv.Tx) error {
		events, byTime, byType, byEntity := tx.Bucket(bktAudit), tx.Bucket(bktAuditByTime),
			tx.Bucket(bktAuditByType), tx.Bucket(bktAuditByEntity)
		// Ids and times only grow (mostly): events, byTime and byType are
		// appendMostly (schema.go).
		delta := map[string]int64{}
		for i := range out {
			e := &out[i]
			id, err := nextID(events)
			if err != nil {
				return err
			}
			e.ID = id
			if err := events.Put(itob(id), encodeAuditEvent(e)); err != nil {
				return err
			}
			code, ms, author := auditEntityCode(e.EntityType), e.CreatedAt.UnixMilli(), itob(e.AuthorID)
			if err := byTime.Put(auditTimeKey(nil, ms, id), author); err != nil {
				return err
			}
			if err := byType.Put(auditTimeKey(auditTypePrefix(code), ms, id), author); err != nil {
				return err
			}
			if err := byEntity.Put(auditTimeKey(auditEntityPrefix(code, e.EntityID), ms, id), author); err != nil {
				return err
			}
			for _, k := range auditCountKeys(code, e.EntityID) {
				delta[string(k)]++
			}
		}
		return addAuditCounts(tx.Bucket(bktAuditCounts), delta)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// addAuditCounts adds delta (by key of audit_counts, negative to take
// away) to the counters; a counter that reaches 0 is deleted.
func addAuditCounts(counts kv.Bucket, delta map[string]int64) error {
	for k, d := range delta {
		n := int64(0)
		if v := counts.Get([]byte(k)); v != nil {
			n = int64(binary.BigEndian.Uint64(v))
		}
		if n += d; n <= 0 {
			if err := counts.Delete([]byte(k)); err != nil {
				return err
			}
			continue
		}
		if err := counts.Put([]byte(k), binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
			return err
		}
	}
	return nil
}

// AuditEvent returns one audit event by id.
func (s *Store) AuditEvent(id int64) (AuditEvent, error) {
	var e AuditEvent
	err := s.db.View(func(tx kv.Tx) error {
		v := tx.Bucket(bktAudit).Get(itob(id))
		if v == nil {
			return notFound("AuditEvent")
		}
		return decodeAuditEvent(id, v, &e)
	})
	return e, err
}
