package store

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// Event is one activity record: registryd's own (a project created, a member
// added or removed) or imported by an admin from elsewhere (pushes, issues,
// merge requests, notes, ...).
type Event struct {
	ID           int64      `json:"id"`
	ProjectID    int64      `json:"project_id"`
	AuthorID     int64      `json:"author_id"`
	Action       string     `json:"action"`
	TargetType   string     `json:"target_type,omitempty"` // a class name: Issue, MergeRequest, Note, ...
	TargetID     *int64     `json:"target_id,omitempty"`
	TargetIID    *int64     `json:"target_iid,omitempty"`
	TargetTitle  *string    `json:"target_title,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	Imported     bool       `json:"imported,omitempty"`
	ImportedFrom string     `json:"imported_from,omitempty"`
	PushData     *PushData  `json:"push_data,omitempty"`
	Note         *EventNote `json:"note,omitempty"`
}

// PushData describes a push event.
type PushData struct {
	CommitCount int64   `json:"commit_count"`
	Action      string  `json:"action"`   // pushed, created or removed
	RefType     string  `json:"ref_type"` // branch or tag
	CommitFrom  *string `json:"commit_from,omitempty"`
	CommitTo    *string `json:"commit_to,omitempty"`
	Ref         string  `json:"ref"`
	CommitTitle *string `json:"commit_title,omitempty"`
	RefCount    *int64  `json:"ref_count,omitempty"`
}

// EventNote is the comment of a commented event.
type EventNote struct {
	ID           int64     `json:"id"`
	Body         string    `json:"body"`
	Attachment   *string   `json:"attachment,omitempty"`
	System       bool      `json:"system,omitempty"`
	NoteableID   *int64    `json:"noteable_id,omitempty"`
	NoteableType string    `json:"noteable_type,omitempty"`
	NoteableIID  *int64    `json:"noteable_iid,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

// Event actions, numbered as GitLab numbers them. The number is what the
// indexes store.
const (
	ActionCreated   = "created"
	ActionUpdated   = "updated"
	ActionClosed    = "closed"
	ActionReopened  = "reopened"
	ActionPushed    = "pushed"
	ActionCommented = "commented"
	ActionMerged    = "merged"
	ActionJoined    = "joined"
	ActionLeft      = "left"
	ActionDestroyed = "destroyed"
	ActionExpired   = "expired"
	ActionApproved  = "approved"
)

// EventActions are the actions an event may have, in code order.
var EventActions = []string{ActionCreated, ActionUpdated, ActionClosed, ActionReopened, ActionPushed,
	ActionCommented, ActionMerged, ActionJoined, ActionLeft, ActionDestroyed, ActionExpired, ActionApproved}

func actionCode(a string) byte {
	for i, x := range EventActions {
		if x == a {
			return byte(i + 1)
		}
	}
	return 0
}

// Target types as stored (class names), with their code in the indexes.
const (
	TargetIssue        = "Issue"
	TargetMergeRequest = "MergeRequest"
	TargetMilestone    = "Milestone"
	TargetNote         = "Note"
	TargetDiffNote     = "DiffNote"
	TargetDiscussion   = "DiscussionNote"
	TargetProject      = "Project"
	TargetSnippet      = "Snippet"
	TargetUser         = "User"
	TargetWiki         = "WikiPage::Meta"
	TargetDesign       = "DesignManagement::Design"
	TargetEpic         = "Epic"
)

var targetTypes = []string{TargetIssue, TargetMergeRequest, TargetMilestone, TargetNote, TargetDiffNote,
	TargetDiscussion, TargetProject, TargetSnippet, TargetUser, TargetWiki, TargetDesign, TargetEpic}

func targetCode(t string) byte {
	if t == "" {
		return 0
	}
	for i, x := range targetTypes {
		if x == t {
			return byte(i + 1)
		}
	}
	return 0xFF
}

// EventTargetFilters maps the values of the target_type filter (the spec's
// list plus GitLab's wiki and design) to the class they select. The match is
// exact, as GitLab's: note selects Note, not DiffNote.
var EventTargetFilters = map[string]string{
	"epic": TargetEpic, "issue": TargetIssue, "merge_request": TargetMergeRequest, "milestone": TargetMilestone,
	"note": TargetNote, "project": TargetProject, "snippet": TargetSnippet, "user": TargetUser,
	"wiki": TargetWiki, "design": TargetDesign,
}

// NormalizeTargetType accepts a class name (Issue, MergeRequest, ...) or a
// filter name (issue, merge_request, ...) and returns the class name, or ""
// and false when it is neither.
func NormalizeTargetType(t string) (string, bool) {
	if targetCode(t) != 0xFF {
		return t, true
	}
	if c, ok := EventTargetFilters[t]; ok {
		return c, true
	}
	return "", false
}

func isNoteType(t string) bool {
	return t == TargetNote || t == TargetDiffNote || t == TargetDiscussion
}

// The fixed header that leads every stored event and is the value of every
// index entry: created_at (Unix ms), project id, author id, action code,
// target type code. Filters read it without decoding the record.
const evHdrLen = 26

func eventHeader(e *Event) []byte {
	h := make([]byte, evHdrLen)
	binary.BigEndian.PutUint64(h, uint64(e.CreatedAt.UnixMilli()))
	binary.BigEndian.PutUint64(h[8:], uint64(e.ProjectID))
	binary.BigEndian.PutUint64(h[16:], uint64(e.AuthorID))
	h[24] = actionCode(e.Action)
	h[25] = targetCode(e.TargetType)
	return h
}

func hdrTime(h []byte) int64    { return int64(binary.BigEndian.Uint64(h)) }
func hdrProject(h []byte) int64 { return int64(binary.BigEndian.Uint64(h[8:])) }

// scopedKey is id (8 bytes), an optional action byte, then the event id.
func scopedKey(scope int64, act byte, withAct bool, id int64) []byte {
	n := 16
	if withAct {
		n = 17
	}
	k := make([]byte, n)
	binary.BigEndian.PutUint64(k, uint64(scope))
	if withAct {
		k[8] = act
	}
	binary.BigEndian.PutUint64(k[n-8:], uint64(id))
	return k
}

// Keys of the event_counts bucket: how many events each scope holds, per
// action, so that totals of unfiltered and action-filtered lists cost no scan.
//
//	'g' action                      -> all events
//	'p' project action              -> a project's events
//	'a' author project action       -> an author's events in one project
func countKeyGlobal(act byte) []byte { return []byte{'g', act} }

func countKeyProject(project int64, act byte) []byte {
	k := make([]byte, 10)
	k[0] = 'p'
	binary.BigEndian.PutUint64(k[1:], uint64(project))
	k[9] = act
	return k
}

func countKeyAuthor(author, project int64, act byte) []byte {
	k := make([]byte, 18)
	k[0] = 'a'
	binary.BigEndian.PutUint64(k[1:], uint64(author))
	binary.BigEndian.PutUint64(k[9:], uint64(project))
	k[17] = act
	return k
}

// eventWriter appends events in one transaction and adds their counts once
// at the end, so that a large import touches each counter once.
type eventWriter struct {
	events, byProject, byAuthor, byProjectAct, byAuthorAct, counts *bolt.Bucket
	delta                                                          map[string]uint64
}

func newEventWriter(tx *bolt.Tx) *eventWriter {
	w := &eventWriter{
		events: tx.Bucket(bktEvents), byProject: tx.Bucket(bktEventsByProject), byAuthor: tx.Bucket(bktEventsByAuthor),
		byProjectAct: tx.Bucket(bktEventsByProjectAct), byAuthorAct: tx.Bucket(bktEventsByAuthorAct),
		counts: tx.Bucket(bktEventCounts), delta: map[string]uint64{},
	}
	// Event ids only grow, so pages may be filled up instead of split in half.
	w.events.FillPercent = 0.95
	return w
}

func (w *eventWriter) add(e *Event) error {
	id, err := nextID(w.events)
	if err != nil {
		return err
	}
	e.ID = id
	raw, err := json.Marshal(e)
	if err != nil {
		return err
	}
	hdr := eventHeader(e)
	act := hdr[24]
	val := make([]byte, 0, evHdrLen+len(raw))
	val = append(append(val, hdr...), raw...)
	if err := w.events.Put(itob(id), val); err != nil {
		return err
	}
	puts := []struct {
		b *bolt.Bucket
		k []byte
	}{
		{w.byProject, scopedKey(e.ProjectID, 0, false, id)},
		{w.byAuthor, scopedKey(e.AuthorID, 0, false, id)},
		{w.byProjectAct, scopedKey(e.ProjectID, act, true, id)},
		{w.byAuthorAct, scopedKey(e.AuthorID, act, true, id)},
	}
	for _, p := range puts {
		if err := p.b.Put(p.k, hdr); err != nil {
			return err
		}
	}
	w.delta[string(countKeyGlobal(act))]++
	w.delta[string(countKeyProject(e.ProjectID, act))]++
	w.delta[string(countKeyAuthor(e.AuthorID, e.ProjectID, act))]++
	return nil
}

func (w *eventWriter) flush() error {
	for k, d := range w.delta {
		n := d
		if v := w.counts.Get([]byte(k)); v != nil {
			n += binary.BigEndian.Uint64(v)
		}
		if err := w.counts.Put([]byte(k), itob(int64(n))); err != nil {
			return err
		}
	}
	w.delta = map[string]uint64{}
	return nil
}

// recordEventTx writes one event registryd records about itself, inside the
// transaction of the change it describes.
func recordEventTx(tx *bolt.Tx, e Event) error {
	w := newEventWriter(tx)
	if err := w.add(&e); err != nil {
		return err
	}
	return w.flush()
}

// Limits of imported events.
const (
	MaxEventTitle    = 1024
	MaxEventRef      = 1024
	MaxEventNoteBody = 1_000_000
)

var (
	importedFromRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	commitIDRE     = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
)

// CheckEvent validates an event to import without reading the database and
// fills the defaults that do not depend on the clock: the class name of
// target_type, target_iid from target_id, the note's id, imported_from.
// Messages go to v under prefix+field ("events[3].action").
func CheckEvent(e *Event, prefix string, v *ValidationError) {
	add := func(field, msg string) { v.Add(prefix+field, msg) }
	if e.ProjectID < 1 {
		add("project_id", "is missing")
	}
	if e.AuthorID < 1 {
		add("author_id", "is missing")
	}
	switch {
	case e.Action == "":
		add("action", "is missing")
	case actionCode(e.Action) == 0:
		add("action", "does not have a valid value")
	}
	if e.TargetType != "" {
		t, ok := NormalizeTargetType(e.TargetType)
		switch {
		case !ok:
			add("target_type", "does not have a valid value")
		case t == TargetEpic:
			add("target_type", "Epic events belong to groups; registryd keeps project events only")
		default:
			e.TargetType = t
		}
	}
	if e.TargetID != nil && *e.TargetID < 1 {
		add("target_id", "must be greater than 0")
	}
	if e.TargetIID != nil && *e.TargetIID < 1 {
		add("target_iid", "must be greater than 0")
	}
	if e.TargetIID == nil && e.TargetID != nil {
		iid := *e.TargetID
		e.TargetIID = &iid
	}
	if e.TargetTitle != nil && utf8.RuneCountInString(*e.TargetTitle) > MaxEventTitle {
		add("target_title", "is too long (maximum is "+strconv.Itoa(MaxEventTitle)+" characters)")
	}
	if e.ImportedFrom == "" {
		e.ImportedFrom = "none"
	} else if !importedFromRE.MatchString(e.ImportedFrom) {
		add("imported_from", "is invalid")
	}
	if !e.CreatedAt.IsZero() && (e.CreatedAt.Year() < 1970 || e.CreatedAt.Year() > 9999) {
		add("created_at", "is invalid")
	}

	switch e.Action {
	case ActionPushed:
		if e.TargetType != "" || e.TargetID != nil || e.TargetTitle != nil {
			add("target_type", "must be blank for pushed events")
		}
		e.TargetIID = nil
		if e.PushData == nil {
			add("push_data", "is missing")
		} else {
			checkPushData(e.PushData, prefix+"push_data.", v)
		}
	case ActionCommented:
		if e.TargetType == "" {
			e.TargetType = TargetNote
		} else if !isNoteType(e.TargetType) {
			add("target_type", "must be Note, DiffNote or DiscussionNote for commented events")
		}
		if e.Note == nil {
			add("note", "is missing")
		} else {
			checkNote(e, prefix+"note.", v)
		}
	}
	if e.PushData != nil && e.Action != ActionPushed {
		add("push_data", "is only allowed on pushed events")
	}
	if e.Note != nil && e.Action != ActionCommented {
		add("note", "is only allowed on commented events")
	}
}

func checkPushData(p *PushData, prefix string, v *ValidationError) {
	if p.CommitCount < 0 {
		v.Add(prefix+"commit_count", "must be greater than or equal to 0")
	}
	switch p.Action {
	case "pushed", "created", "removed":
	case "":
		v.Add(prefix+"action", "is missing")
	default:
		v.Add(prefix+"action", "does not have a valid value")
	}
	switch p.RefType {
	case "branch", "tag":
	case "":
		v.Add(prefix+"ref_type", "is missing")
	default:
		v.Add(prefix+"ref_type", "does not have a valid value")
	}
	switch {
	case p.Ref == "":
		v.Add(prefix+"ref", "is missing")
	case len(p.Ref) > MaxEventRef:
		v.Add(prefix+"ref", "is too long (maximum is "+strconv.Itoa(MaxEventRef)+" characters)")
	}
	for _, c := range []struct {
		name string
		val  *string
	}{{"commit_from", p.CommitFrom}, {"commit_to", p.CommitTo}} {
		if c.val != nil && !commitIDRE.MatchString(*c.val) {
			v.Add(prefix+c.name, "is not a commit id")
		}
	}
	if p.CommitTitle != nil && utf8.RuneCountInString(*p.CommitTitle) > MaxEventTitle {
		v.Add(prefix+"commit_title", "is too long (maximum is "+strconv.Itoa(MaxEventTitle)+" characters)")
	}
	if p.RefCount != nil && *p.RefCount < 0 {
		v.Add(prefix+"ref_count", "must be greater than or equal to 0")
	}
}

func checkNote(e *Event, prefix string, v *ValidationError) {
	n := e.Note
	switch {
	case n.Body == "":
		v.Add(prefix+"body", "is missing")
	case len(n.Body) > MaxEventNoteBody:
		v.Add(prefix+"body", "is too long (maximum is "+strconv.Itoa(MaxEventNoteBody)+" bytes)")
	}
	if n.ID < 0 {
		v.Add(prefix+"id", "must be greater than 0")
	}
	if n.ID == 0 && e.TargetID != nil {
		n.ID = *e.TargetID
	}
	if n.NoteableID != nil && *n.NoteableID < 1 {
		v.Add(prefix+"noteable_id", "must be greater than 0")
	}
	if n.NoteableIID != nil && *n.NoteableIID < 1 {
		v.Add(prefix+"noteable_iid", "must be greater than 0")
	}
	if len(n.NoteableType) > 255 {
		v.Add(prefix+"noteable_type", "is too long (maximum is 255 characters)")
	}
}

// MaxImportProblems bounds how many problems one failed import reports.
const MaxImportProblems = 10

// ImportResult says what an import stored.
type ImportResult struct {
	Count           int
	FirstID, LastID int64
}

// ImportEvents validates evs (CheckEvent, then that every project and author
// exists) and stores them in one transaction: all of them or none. Events
// without created_at get the store's clock. Ids follow the order of evs.
func (s *Store) ImportEvents(evs []Event) (ImportResult, error) {
	v := &ValidationError{}
	for i := range evs {
		if len(v.Fields) >= MaxImportProblems {
			break
		}
		CheckEvent(&evs[i], "events["+strconv.Itoa(i)+"].", v)
	}
	if err := v.Err(); err != nil {
		return ImportResult{}, err
	}
	now := s.clock()
	var res ImportResult
	err := s.update(false, false, func(tx *bolt.Tx) error {
		projects, users := map[int64]bool{}, map[int64]bool{}
		for i := range evs {
			e := &evs[i]
			at := "events[" + strconv.Itoa(i) + "]."
			ok, seen := projects[e.ProjectID]
			if !seen {
				ok = tx.Bucket(bktProjects).Get(itob(e.ProjectID)) != nil
				projects[e.ProjectID] = ok
			}
			if !ok {
				v.Add(at+"project_id", "does not exist")
			}
			ok, seen = users[e.AuthorID]
			if !seen {
				ok = tx.Bucket(bktUsers).Get(itob(e.AuthorID)) != nil
				users[e.AuthorID] = ok
			}
			if !ok {
				v.Add(at+"author_id", "does not exist")
			}
			if len(v.Fields) >= MaxImportProblems {
				break
			}
		}
		if err := v.Err(); err != nil {
			return err
		}
		w := newEventWriter(tx)
		for i := range evs {
			e := &evs[i]
			if e.CreatedAt.IsZero() {
				e.CreatedAt = now
			}
			e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Millisecond)
			if e.Note != nil && e.Note.CreatedAt.IsZero() {
				e.Note.CreatedAt = e.CreatedAt
			}
			if err := w.add(e); err != nil {
				return err
			}
			if i == 0 {
				res.FirstID = e.ID
			}
			res.LastID = e.ID
		}
		res.Count = len(evs)
		return w.flush()
	})
	if err != nil {
		return ImportResult{}, err
	}
	return res, nil
}

// Event returns one event by id.
func (s *Store) Event(id int64) (Event, error) {
	var e Event
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bktEvents).Get(itob(id))
		if v == nil {
			return notFound("Event")
		}
		return decodeEvent(v, &e)
	})
	return e, err
}

func decodeEvent(v []byte, e *Event) error {
	if len(v) < evHdrLen {
		return fmt.Errorf("store: corrupt event record of %d bytes", len(v))
	}
	return json.Unmarshal(v[evHdrLen:], e)
}

// EventQuery selects one page of events. Exactly one scope applies, checked
// in this order: ProjectID, AuthorID, Projects (non-nil), All.
type EventQuery struct {
	// ProjectID lists the events of one project.
	ProjectID int64
	// AuthorID lists the events by one user; HiddenProjects leaves out the
	// events of projects the caller may not read.
	AuthorID       int64
	HiddenProjects map[int64]bool
	// Projects lists the events of these projects (GET /events?scope=all for
	// a caller who may read only some projects). Empty and non-nil: nothing.
	Projects []int64
	// All lists every event.
	All bool

	// Action is one of EventActions, or "" for any.
	Action string
	// TargetType is a class name (see EventTargetFilters), or "" for any.
	TargetType string
	// CreatedBefore keeps events created strictly before it; CreatedFrom
	// keeps events created at or after it. Zero: unbounded.
	CreatedBefore, CreatedFrom time.Time
	// Asc sorts by id ascending; the default is descending.
	Asc bool

	Offset, Limit int
}

// EventsPage returns one page of events and how many match in all. A page
// reads its entries from the scope's index and only the records it returns:
// unfiltered and action-filtered lists cost O(offset + page) and their total
// comes from counters; target_type and date filters also scan the scope's
// index (fixed-size headers, no decoding) to count.
func (s *Store) EventsPage(q EventQuery) ([]Event, int, error) {
	var out []Event
	total := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		act := byte(0)
		if q.Action != "" {
			if act = actionCode(q.Action); act == 0 {
				return invalid("action", "does not have a valid value")
			}
		}
		tgt := byte(0)
		if q.TargetType != "" {
			tgt = targetCode(q.TargetType)
		}
		srcs, actByIndex := q.sources(tx, act)
		var from, before int64 = 0, 0
		if !q.CreatedFrom.IsZero() {
			from = q.CreatedFrom.UnixMilli()
		}
		if !q.CreatedBefore.IsZero() {
			before = q.CreatedBefore.UnixMilli()
		}
		scan := tgt != 0 || from != 0 || before != 0
		hidden := q.AuthorID != 0 && q.ProjectID == 0 && len(q.HiddenProjects) > 0
		match := func(h []byte) bool {
			switch {
			case act != 0 && !actByIndex && h[24] != act:
				return false
			case tgt != 0 && h[25] != tgt:
				return false
			case from != 0 && hdrTime(h) < from:
				return false
			case before != 0 && hdrTime(h) >= before:
				return false
			case hidden && q.HiddenProjects[hdrProject(h)]:
				return false
			}
			return true
		}
		if scan {
			for _, c := range srcs {
				for c.start(); c.k != nil; c.advance() {
					if match(c.v[:evHdrLen]) {
						total++
					}
				}
			}
		} else {
			total = q.countTx(tx, act)
		}
		if q.Limit <= 0 || q.Offset >= total {
			return nil
		}
		it := newEventMerge(srcs, !q.Asc)
		skipped := 0
		events := tx.Bucket(bktEvents)
		for id, h, ok := it.next(); ok && len(out) < q.Limit; id, h, ok = it.next() {
			if !match(h) {
				continue
			}
			if skipped < q.Offset {
				skipped++
				continue
			}
			var e Event
			v := events.Get(itob(id))
			if v == nil {
				return fmt.Errorf("store: event %d is indexed but missing", id)
			}
			if err := decodeEvent(v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, total, err
}

// sources are the index ranges that hold the query's events; actByIndex
// says whether they hold only events of the action already.
func (q EventQuery) sources(tx *bolt.Tx, act byte) (srcs []*evCursor, actByIndex bool) {
	scoped := func(plain, byAct []byte, scope int64) *evCursor {
		if act != 0 {
			p := make([]byte, 9)
			binary.BigEndian.PutUint64(p, uint64(scope))
			p[8] = act
			return &evCursor{c: tx.Bucket(byAct).Cursor(), prefix: p, desc: !q.Asc}
		}
		return &evCursor{c: tx.Bucket(plain).Cursor(), prefix: itob(scope), desc: !q.Asc}
	}
	switch {
	case q.ProjectID != 0:
		return []*evCursor{scoped(bktEventsByProject, bktEventsByProjectAct, q.ProjectID)}, true
	case q.AuthorID != 0:
		return []*evCursor{scoped(bktEventsByAuthor, bktEventsByAuthorAct, q.AuthorID)}, true
	case q.Projects != nil:
		for _, p := range q.Projects {
			srcs = append(srcs, scoped(bktEventsByProject, bktEventsByProjectAct, p))
		}
		return srcs, true
	case q.All:
		return []*evCursor{{c: tx.Bucket(bktEvents).Cursor(), desc: !q.Asc}}, false
	}
	return nil, true
}

// countTx is the query's total from the counters (no target or date filter).
func (q EventQuery) countTx(tx *bolt.Tx, act byte) int {
	b := tx.Bucket(bktEventCounts)
	sum := func(prefix []byte, keep func(k []byte) bool) int {
		n := 0
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if (act == 0 || k[len(k)-1] == act) && (keep == nil || keep(k)) {
				n += int(binary.BigEndian.Uint64(v))
			}
		}
		return n
	}
	project := func(id int64) int { return sum(append([]byte{'p'}, itob(id)...), nil) }
	switch {
	case q.ProjectID != 0:
		return project(q.ProjectID)
	case q.AuthorID != 0:
		return sum(append([]byte{'a'}, itob(q.AuthorID)...), func(k []byte) bool {
			return !q.HiddenProjects[btoi(k[9:17])]
		})
	case q.Projects != nil:
		n := 0
		for _, p := range q.Projects {
			n += project(p)
		}
		return n
	case q.All:
		return sum([]byte{'g'}, nil)
	}
	return 0
}

// EventProjectIDs lists the projects that hold events: all of them when
// author is 0, else those where author has events.
func (s *Store) EventProjectIDs(author int64) ([]int64, error) {
	var out []int64
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bktEventCounts).Cursor()
		prefix, at := []byte{'p'}, 1
		if author != 0 {
			prefix, at = append([]byte{'a'}, itob(author)...), 9
		}
		var last int64
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if id := btoi(k[at : at+8]); id != last {
				out = append(out, id)
				last = id
			}
		}
		return nil
	})
	return out, err
}

// evCursor walks one key range (all keys with prefix) of an event bucket in
// id order; the event id is the last 8 bytes of each key and the header
// leads each value.
type evCursor struct {
	c      *bolt.Cursor
	prefix []byte
	desc   bool
	k, v   []byte
}

func (e *evCursor) start() {
	switch {
	case !e.desc:
		e.k, e.v = e.c.Seek(e.prefix)
	case len(e.prefix) == 0:
		e.k, e.v = e.c.Last()
	default:
		end := prefixEnd(e.prefix)
		if end == nil {
			e.k, e.v = e.c.Last()
		} else if e.k, e.v = e.c.Seek(end); e.k == nil {
			e.k, e.v = e.c.Last()
		} else {
			e.k, e.v = e.c.Prev()
		}
	}
	e.check()
}

func (e *evCursor) advance() {
	if e.desc {
		e.k, e.v = e.c.Prev()
	} else {
		e.k, e.v = e.c.Next()
	}
	e.check()
}

func (e *evCursor) check() {
	if e.k != nil && (!bytes.HasPrefix(e.k, e.prefix) || len(e.v) < evHdrLen) {
		e.k, e.v = nil, nil
	}
}

func (e *evCursor) id() int64 { return btoi(e.k[len(e.k)-8:]) }

// prefixEnd is the smallest key above every key with prefix p, or nil.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// eventMerge yields the entries of several ranges in one id order.
type eventMerge struct {
	one  *evCursor
	h    evHeap
	init bool
	srcs []*evCursor
}

func newEventMerge(srcs []*evCursor, desc bool) *eventMerge {
	m := &eventMerge{srcs: srcs}
	if len(srcs) == 1 {
		m.one = srcs[0]
	}
	m.h.desc = desc
	return m
}

func (m *eventMerge) next() (int64, []byte, bool) {
	if m.one != nil {
		if !m.init {
			m.one.start()
			m.init = true
		} else if m.one.k != nil {
			m.one.advance()
		}
		if m.one.k == nil {
			return 0, nil, false
		}
		return m.one.id(), m.one.v[:evHdrLen], true
	}
	if !m.init {
		m.init = true
		for _, c := range m.srcs {
			if c.start(); c.k != nil {
				m.h.cs = append(m.h.cs, c)
			}
		}
		heap.Init(&m.h)
	} else if len(m.h.cs) > 0 {
		// Advance the cursor whose entry was returned last.
		top := m.h.cs[0]
		if top.advance(); top.k == nil {
			heap.Pop(&m.h)
		} else {
			heap.Fix(&m.h, 0)
		}
	}
	if len(m.h.cs) == 0 {
		return 0, nil, false
	}
	top := m.h.cs[0]
	return top.id(), top.v[:evHdrLen], true
}

type evHeap struct {
	cs   []*evCursor
	desc bool
}

func (h *evHeap) Len() int { return len(h.cs) }
func (h *evHeap) Less(i, j int) bool {
	if h.desc {
		return h.cs[i].id() > h.cs[j].id()
	}
	return h.cs[i].id() < h.cs[j].id()
}
func (h *evHeap) Swap(i, j int) { h.cs[i], h.cs[j] = h.cs[j], h.cs[i] }
func (h *evHeap) Push(x any)    { h.cs = append(h.cs, x.(*evCursor)) }
func (h *evHeap) Pop() any {
	x := h.cs[len(h.cs)-1]
	h.cs = h.cs[:len(h.cs)-1]
	return x
}
