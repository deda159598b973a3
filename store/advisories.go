package store

import (
	"bytes"
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"registryd/store/kv"
)

// Advisory is a security advisory of registryd's offline database: an OSV
// record reduced to what matching and the dependency list need. The store
// keeps advisories and the matches of every project's dependencies; what a
// package's affected versions are is the matcher's business
// (AdvisoryMatcher), so AdvisoryPackage.Affected is opaque here.
type Advisory struct {
	ID string
	// Summary is the name dependency lists show (the record's summary,
	// else its id).
	Summary string
	// Severity is one of Severities.
	Severity string
	// Aliases are the record's other ids (CVE-..., GHSA-...): a dependency
	// affected by several advisories that name each other lists one
	// vulnerability.
	Aliases  []string
	Modified time.Time
	Packages []AdvisoryPackage
	// Digest identifies the record's content: an import that brings the
	// stored digest again changes nothing.
	Digest string
	// Withdrawn advisories are removed by an import, as are advisories
	// without packages.
	Withdrawn bool
}

// AdvisoryPackage is a package an advisory affects: its ecosystem and
// name as the matcher normalises them, and the matcher's description of
// the affected versions.
type AdvisoryPackage struct {
	Ecosystem, Name string
	Affected        []byte
}

// AdvisoryMatcher decides whether a version of a package is affected, from
// the AdvisoryPackage.Affected it wrote. It is injected (Options.Matcher)
// so that the store stays ignorant of version orders.
type AdvisoryMatcher interface {
	Affects(ecosystem, version string, affected []byte) bool
	// PackageOf is the package advisories name an entry by when the upload
	// does not say (NewDependency.Package): from its package manager and
	// listed name; "" when the manager has no ecosystem.
	PackageOf(manager, name string) (ecosystem, pkg string)
}

// Limits of advisories: longer values are refused at import.
const (
	MaxAdvisoryID       = 255
	MaxAdvisoryAliases  = 64
	MaxAdvisoryPackages = 1024
	// MaxPackageKey bounds ecosystem + name, so that the package can be a
	// key of the engines' indexes. No advisory database names longer
	// packages; a dependency whose name is longer is not matched.
	MaxPackageKey = 512
	// MaxAffectedBytes bounds one package's affected description.
	MaxAffectedBytes = 256 << 10
)

// storedAdvisory is an advisory's record in bktAdvisories: what an import
// compares and what removing it must undo.
type storedAdvisory struct {
	ID       string      `json:"id"`
	Source   string      `json:"source"`
	Digest   string      `json:"digest"`
	Modified time.Time   `json:"modified"`
	Summary  string      `json:"summary"`
	Severity string      `json:"severity"`
	Aliases  []string    `json:"aliases,omitempty"`
	Packages [][2]string `json:"packages"`
}

// AdvisoryImport says what an import brings.
type AdvisoryImport struct {
	// Source names the copy of a database being imported (a configured
	// path or URL, or an admin's name for an upload); each advisory belongs
	// to the source that last brought it. 1 to 255 bytes.
	Source string
	// Full says the import is a complete copy of the source: its
	// advisories that the import does not bring are removed. A partial
	// import only adds, replaces and removes withdrawn advisories.
	Full bool
	// BatchSize is how many changed advisories one transaction writes (and
	// re-matches the dependencies of). Default 200.
	BatchSize int
}

// MaxAdvisorySource bounds AdvisoryImport.Source.
const MaxAdvisorySource = 255

// AdvisoryImportResult counts what an import did.
type AdvisoryImportResult struct {
	Source string `json:"source"`
	Full   bool   `json:"full"`
	// Read is the number of records the import brought.
	Read      int `json:"read"`
	Added     int `json:"added"`
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
	// Removed: withdrawn, gone from a full copy, or no longer naming a
	// package of an ecosystem registryd keeps.
	Removed int `json:"removed"`
	// Skipped: withdrawn or of no ecosystem registryd keeps, and not
	// stored before; Invalid: a value over a limit.
	Skipped int `json:"skipped"`
	Invalid int `json:"invalid"`
	// Projects whose list changed, and entries whose vulnerabilities
	// changed, by this import.
	Projects     int       `json:"projects"`
	Dependencies int       `json:"dependencies"`
	Complete     bool      `json:"complete"`
	StartedAt    time.Time `json:"started_at"`
	FinishedAt   time.Time `json:"finished_at"`
}

// advisoryOp is one change an import batch makes: a put, or a removal
// when adv is nil.
type advisoryOp struct {
	id  string
	adv *Advisory
}

func validAdvisory(a *Advisory) bool {
	if a.ID == "" || len(a.ID) > MaxAdvisoryID || strings.IndexByte(a.ID, 0) >= 0 ||
		len(a.Aliases) > MaxAdvisoryAliases || len(a.Packages) > MaxAdvisoryPackages ||
		utf8.RuneCountInString(a.Summary) > MaxVulnerabilityName {
		return false
	}
	for _, al := range a.Aliases {
		if len(al) > MaxVulnerabilityID {
			return false
		}
	}
	for _, p := range a.Packages {
		if !matchable(p.Ecosystem, p.Name) || len(p.Affected) == 0 || len(p.Affected) > MaxAffectedBytes ||
			!json.Valid(p.Affected) {
			return false
		}
	}
	return true
}

// ImportAdvisories stores the advisories of a copy of an advisory
// database and re-matches the dependency lists they change: an advisory
// whose digest is the stored one costs nothing; a new, changed, withdrawn
// or (Full) missing one is written or removed, batch after batch, each
// batch in one transaction with the re-match of every entry, of every
// project, whose package it names (found through the package index), so
// the cost of an import is that of the advisories it changes and the
// entries they name. A failure of advs (a broken archive) stops the import
// after the batches it committed, without the sweep of a Full import; the
// result says Complete false. One import of a source at a time: callers
// serialise them (admin and the scheduled refresh share a lock).
func (s *Store) ImportAdvisories(imp AdvisoryImport, advs iter.Seq2[*Advisory, error]) (AdvisoryImportResult, error) {
	res := AdvisoryImportResult{Source: imp.Source, Full: imp.Full, StartedAt: s.clock()}
	if imp.Source == "" || len(imp.Source) > MaxAdvisorySource || strings.IndexByte(imp.Source, 0) >= 0 {
		v := &ValidationError{}
		v.Add("source", "must be 1 to "+strconv.Itoa(MaxAdvisorySource)+" bytes without NUL")
		return res, v
	}
	if imp.BatchSize <= 0 {
		imp.BatchSize = 200
	}
	known := map[string]string{} // this source's advisories not seen yet: id -> digest
	prefix := append([]byte(imp.Source), 0)
	if err := s.db.View(func(tx kv.Tx) error {
		clear(known)
		c := tx.Bucket(bktAdvisorySources).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			known[string(k[len(prefix):])] = string(v)
		}
		return nil
	}); err != nil {
		return res, err
	}
	var batch []advisoryOp
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.importBatch(imp.Source, batch, &res)
		batch = batch[:0]
		return err
	}
	for a, err := range advs {
		if err != nil {
			if ferr := flush(); ferr != nil {
				return res, ferr
			}
			res.FinishedAt = s.clock()
			return res, err
		}
		res.Read++
		digest, isKnown := known[a.ID]
		delete(known, a.ID)
		switch {
		case a.Withdrawn || len(a.Packages) == 0:
			if isKnown {
				batch = append(batch, advisoryOp{id: a.ID})
			} else {
				res.Skipped++
			}
		case !validAdvisory(a):
			res.Invalid++
			if isKnown {
				batch = append(batch, advisoryOp{id: a.ID})
			}
		case isKnown && digest == a.Digest:
			res.Unchanged++
		default:
			if !slices.Contains(Severities, a.Severity) {
				a.Severity = "unknown"
			}
			batch = append(batch, advisoryOp{id: a.ID, adv: a})
		}
		if len(batch) >= imp.BatchSize {
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
	if imp.Full {
		for _, id := range slices.Sorted(maps.Keys(known)) {
			batch = append(batch, advisoryOp{id: id})
			if len(batch) >= imp.BatchSize {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	res.Complete, res.FinishedAt = true, s.clock()
	err := s.update(false, false, func(tx kv.Tx) error {
		return putJSON(tx.Bucket(bktAdvisoryImports), []byte(imp.Source), res)
	})
	return res, err
}

// importBatch writes one batch and re-matches what it changed, in one
// transaction, and adds its counts to res.
func (s *Store) importBatch(source string, ops []advisoryOp, res *AdvisoryImportResult) error {
	var added, changed, unchanged, removed, projects, entries int
	err := s.update(false, false, func(tx kv.Tx) error {
		added, changed, unchanged, removed, projects, entries = 0, 0, 0, 0, 0, 0
		recs, byPkg, sources := tx.Bucket(bktAdvisories), tx.Bucket(bktAdvisoryPkgs), tx.Bucket(bktAdvisorySources)
		touched := map[string]bool{}
		var mem arena
		for _, op := range ops {
			var old storedAdvisory
			exists := getJSON(recs, []byte(op.id), &old)
			if exists && op.adv != nil && old.Digest == op.adv.Digest {
				// The same record from another source: it moves to this one.
				unchanged++
				if old.Source == source {
					continue
				}
				if err := sources.Delete(advisorySourceKey(old.Source, op.id)); err != nil {
					return err
				}
				old.Source = source
				if err := sources.Put(advisorySourceKey(source, op.id), []byte(old.Digest)); err != nil {
					return err
				}
				if err := putJSON(recs, []byte(op.id), old); err != nil {
					return err
				}
				continue
			}
			if exists {
				for _, p := range old.Packages {
					pk := pkgKey(p[0], p[1])
					touched[string(pk)] = true
					if err := byPkg.Delete(advisoryPkgKey(pk, op.id)); err != nil {
						return err
					}
				}
				if err := sources.Delete(advisorySourceKey(old.Source, op.id)); err != nil {
					return err
				}
			}
			if op.adv == nil {
				if exists {
					removed++
					if err := recs.Delete([]byte(op.id)); err != nil {
						return err
					}
				}
				continue
			}
			a := op.adv
			if exists {
				changed++
			} else {
				added++
			}
			rec := storedAdvisory{ID: a.ID, Source: source, Digest: a.Digest, Modified: a.Modified, Summary: a.Summary,
				Severity: a.Severity, Aliases: a.Aliases}
			for _, p := range a.Packages {
				pk := pkgKey(p.Ecosystem, p.Name)
				touched[string(pk)] = true
				rec.Packages = append(rec.Packages, [2]string{p.Ecosystem, p.Name})
				raw, err := json.Marshal(pkgAdvisory{ID: a.ID, Summary: a.Summary, Severity: a.Severity, Aliases: a.Aliases,
					Affected: p.Affected})
				if err != nil {
					return err
				}
				if err := byPkg.Put(advisoryPkgKey(pk, a.ID), mem.copy(raw)); err != nil {
					return err
				}
			}
			if err := sources.Put(advisorySourceKey(source, a.ID), []byte(a.Digest)); err != nil {
				return err
			}
			if err := putJSON(recs, []byte(a.ID), rec); err != nil {
				return err
			}
		}
		if len(touched) == 0 {
			return nil
		}
		meta := tx.Bucket(bktMeta)
		if err := meta.Put(metaAdvisoryGen, itob(int64(advisoryGen(tx)+1))); err != nil {
			return err
		}
		var err error
		projects, entries, err = s.rematch(tx, touched)
		return err
	})
	if err != nil {
		return err
	}
	res.Added += added
	res.Changed += changed
	res.Unchanged += unchanged
	res.Removed += removed
	res.Projects += projects
	res.Dependencies += entries
	return nil
}

func advisorySourceKey(source, id string) []byte {
	k := make([]byte, 0, len(source)+1+len(id))
	return append(append(append(k, source...), 0), id...)
}

// rematch re-evaluates every entry, of every project, whose package is in
// touched, against the advisories now in tx, and rewrites the chunks
// whose entries changed. It returns how many projects and entries changed.
func (s *Store) rematch(tx kv.Tx, touched map[string]bool) (projects, entries int, err error) {
	idx := tx.Bucket(bktDepsByPkg)
	work := map[int64][]int64{} // project -> positions
	add := func(project int64, positions []int64) {
		work[project] = append(work[project], positions...)
	}
	for _, pks := range slices.Sorted(maps.Keys(touched)) {
		pk := []byte(pks)
		h := pkgHash(pk)
		prefix := pkgExactPrefix(pk)
		c := idx.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(k) == len(prefix)+8 {
				add(btoi(k[len(prefix):]), pkgPositions(v, h))
			}
		}
		bprefix := pkgBucketPrefix(pkgBucket(h))
		for k, v := c.Seek(bprefix); k != nil && bytes.HasPrefix(k, bprefix); k, v = c.Next() {
			if len(k) == len(bprefix)+8 {
				add(btoi(k[len(bprefix):]), pkgPositions(v, h))
			}
		}
	}
	cache := &advisoryCache{tx: tx}
	for _, project := range slices.Sorted(maps.Keys(work)) {
		n, err := s.rematchProject(tx, project, work[project], touched, cache)
		if err != nil {
			return 0, 0, err
		}
		if n > 0 {
			projects++
			entries += n
		}
	}
	return projects, entries, nil
}

// rematchProject re-matches the entries of one list at positions whose
// package is in touched, and returns how many changed.
func (s *Store) rematchProject(tx kv.Tx, project int64, positions []int64, touched map[string]bool,
	cache *advisoryCache) (int, error) {
	lists, depsB := tx.Bucket(bktDepLists), tx.Bucket(bktDependencies)
	var list storedDepList
	if !getJSON(lists, itob(project), &list) || list.Layout != depLayoutPackages {
		return 0, nil
	}
	slices.Sort(positions)
	positions = slices.Compact(positions)
	r := newVulnResolver(tx, project, s.clock())
	if list.VulnRefs == nil {
		list.VulnRefs = map[int64]int{}
	}
	changed := 0
	var mem arena
	enc := newDepEncoder()
	for i := 0; i < len(positions); {
		chunk := (positions[i] - 1) / depsPerChunk
		j := i
		for j < len(positions) && (positions[j]-1)/depsPerChunk == chunk {
			j++
		}
		entries := chunkEntries(depsB, project, chunk)
		dirty := false
		for _, pos := range positions[i:j] {
			k := int((pos - 1) % depsPerChunk)
			if k >= len(entries) {
				continue
			}
			d := &entries[k]
			name := packageName(d)
			if !touched[string(pkgKey(d.Ecosystem, name))] {
				continue // another package of the same hash
			}
			before := d.Vulnerabilities
			if err := matchEntry(s.matcher, r, d, cache.of(d.Ecosystem, name)); err != nil {
				return 0, err
			}
			if sameVulns(before, d.Vulnerabilities) {
				continue
			}
			dirty = true
			changed++
			for _, v := range before {
				if list.VulnRefs[v.ID]--; list.VulnRefs[v.ID] <= 0 {
					delete(list.VulnRefs, v.ID)
				}
			}
			for _, v := range d.Vulnerabilities {
				list.VulnRefs[v.ID]++
			}
		}
		if dirty {
			enc.reset()
			for k := range entries {
				enc.add(&entries[k])
			}
			if err := depsB.Put(pair(project, chunk), mem.copy(enc.buf)); err != nil {
				return 0, err
			}
		}
		i = j
	}
	if changed == 0 {
		return 0, nil
	}
	list.Vulnerabilities = len(list.VulnRefs)
	return changed, putJSON(lists, itob(project), list)
}

// chunkEntries decodes every entry of one chunk of a list.
func chunkEntries(b kv.Bucket, project, chunk int64) []Dependency {
	r := &depChunkReader{b: b, project: project, chunk: -1}
	var out []Dependency
	for pos := chunk*depsPerChunk + 1; pos <= (chunk+1)*depsPerChunk; pos++ {
		d, ok := r.at(pos)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

// AdvisoryStatus describes the advisory database.
type AdvisoryStatus struct {
	Advisories int                    `json:"advisories"`
	Packages   int                    `json:"packages"`
	Generation uint64                 `json:"generation"`
	Imports    []AdvisoryImportResult `json:"imports"`
}

// AdvisoryStatus counts the advisories and lists each source's last
// import.
func (s *Store) AdvisoryStatus() (AdvisoryStatus, error) {
	var st AdvisoryStatus
	err := s.db.View(func(tx kv.Tx) error {
		st = AdvisoryStatus{Imports: []AdvisoryImportResult{}}
		n := keyCounts(tx)
		st.Advisories, st.Packages = int(n[countAdvisories]), int(n[countAdvisoryPkgs])
		st.Generation = advisoryGen(tx)
		return tx.Bucket(bktAdvisoryImports).ForEach(func(k, v []byte) error {
			var r AdvisoryImportResult
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			st.Imports = append(st.Imports, r)
			return nil
		})
	})
	return st, err
}

// advisoryByID returns a stored advisory (its record, without the
// packages' affected versions).
func (s *Store) advisoryByID(id string) (Advisory, error) {
	var a Advisory
	err := s.db.View(func(tx kv.Tx) error {
		var rec storedAdvisory
		if !getJSON(tx.Bucket(bktAdvisories), []byte(id), &rec) {
			return notFound("Advisory")
		}
		a = Advisory{ID: rec.ID, Summary: rec.Summary, Severity: rec.Severity, Aliases: rec.Aliases,
			Modified: rec.Modified, Digest: rec.Digest}
		for _, p := range rec.Packages {
			a.Packages = append(a.Packages, AdvisoryPackage{Ecosystem: p[0], Name: p[1]})
		}
		return nil
	})
	return a, err
}
