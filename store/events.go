package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"registryd/store/kv"
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
	events, byProject, byAuthor, byProjectAct, byAuthorAct, counts kv.Bucket
	delta                                                          map[string]uint64
}

func newEventWriter(tx kv.Tx) *eventWriter {
	w := &eventWriter{
		events: tx.Bucket(bktEvents), byProject: tx.Bucket(bktEventsByProject), byAuthor: tx.Bucket(bktEventsByAuthor),
		byProjectAct: tx.Bucket(bktEventsByProjectAct), byAuthorAct: tx.Bucket(bktEventsByAuthorAct),
		counts: tx.Bucket(bktEventCounts), delta: map[string]uint64{},
	}
	// Event ids only grow: events is appendMostly (schema.go).
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
		b kv.Bucket
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
func recordEventTx(tx kv.Tx, e Event) error {
	w := newEventWriter(tx)
	if err := w.add(&e); err != nil {
		return err
	}
	return w.flush()
}

// MaxImportProblems bounds how many problems one failed import reports.
const MaxImportProblems = 10

// ImportResult says what an import stored.
type ImportResult struct {
	Count           int
	FirstID, LastID int64
}

// ImportEvents stores evs in one transaction: all of them or none. Their
// fields are the importer's to check (eventimport.CheckEvent); the store
// refuses what its indexes cannot hold (an action or target type without a
// code) and events of a project or author that does not exist. Events
// without created_at get the store's clock. Ids follow the order of evs.
func (s *Store) ImportEvents(evs []Event) (ImportResult, error) {
	v := &ValidationError{}
	for i := range evs {
		if len(v.Fields) >= MaxImportProblems {
			break
		}
		checkEventCodes(&evs[i], "events["+strconv.Itoa(i)+"].", v)
	}
	if err := v.Err(); err != nil {
		return ImportResult{}, err
	}
	now := s.clock()
	var res ImportResult
	err := s.update(false, false, func(tx kv.Tx) error {
		// Problems of this run only: kv may run the function again after an
		// attempt that failed inside the engine.
		v := &ValidationError{}
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

// checkEventCodes refuses an event whose action or target type has no code
// in the indexes (a target type is stored as its class name), with the
// messages of eventimport.CheckEvent.
func checkEventCodes(e *Event, prefix string, v *ValidationError) {
	switch {
	case e.Action == "":
		v.Add(prefix+"action", "is missing")
	case actionCode(e.Action) == 0:
		v.Add(prefix+"action", "does not have a valid value")
	}
	if targetCode(e.TargetType) == 0xFF {
		v.Add(prefix+"target_type", "does not have a valid value")
	}
}

// Event returns one event by id.
func (s *Store) Event(id int64) (Event, error) {
	var e Event
	err := s.db.View(func(tx kv.Tx) error {
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
