package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/store/blob"
	"registryd/store/kv"
	"registryd/store/kv/boltkv"
)

// countingDB counts the write transactions its engine committed.
type countingDB struct {
	kv.DB
	commits atomic.Int64
}

func (d *countingDB) Update(fn func(kv.Tx) error) error {
	err := d.DB.Update(fn)
	if err == nil {
		d.commits.Add(1)
	}
	return err
}

// openCounting opens a store of a fresh directory on the test engine (bbolt
// by default) wrapped in a countingDB, with o's batch bounds.
func openCounting(t testing.TB, o Options) (*Store, *countingDB) {
	t.Helper()
	dir := t.TempDir()
	var engine kv.DB
	if hook := testEngine(t); hook != nil {
		engine = hook(t, dir)
	} else {
		db, err := boltkv.Open(filepath.Join(dir, "registry.db"), boltkv.Options{Timeout: time.Second})
		noErr(t, err)
		engine = db
	}
	c := &countingDB{DB: engine}
	o.SecretKey, o.Engine = testKey, c
	if o.Now == nil {
		o.Now = newClock().Now
	}
	s, err := Open(o)
	noErr(t, err)
	t.Cleanup(func() { s.Close() })
	return s, c
}

// countingBlobEnv is a blobEnv (one registry, one upstream, a blob store)
// on openCounting's store.
func countingBlobEnv(t testing.TB, o Options) (blobEnv, *countingDB) {
	t.Helper()
	s, db := openCounting(t, o)
	b, err := blob.Open(t.TempDir(), blob.Options{})
	noErr(t, err)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	return blobEnv{s: s, b: b, up: up(t, s, r.ID, "https://repo.example.com/maven2").ID}, db
}

// holdFirstBatch makes the batcher's first batch wait until n writes are
// queued (the one in the batch included), so that the rest pile up behind
// it as they do behind a slow commit.
func holdFirstBatch(s *Store, n int) {
	var queued sync.WaitGroup
	queued.Add(n)
	var left atomic.Int64
	left.Store(int64(n))
	s.batch.onQueue = func() {
		if left.Add(-1) >= 0 {
			queued.Done()
		}
	}
	var once sync.Once
	s.batch.onBatch = func(int) { once.Do(queued.Wait) }
}

// TestGroupCommitCoalescesPublishes: many fills publishing at once share
// few transactions, every entry is stored with its blob, and each caller
// sees the cache generation moved when its publish returns.
func TestGroupCommitCoalescesPublishes(t *testing.T) {
	const writers, maxN = 200, 64
	e, db := countingBlobEnv(t, Options{BatchMaxEntries: maxN, BatchMaxHold: time.Hour})
	s, b := e.s, e.b

	holdFirstBatch(s, writers)
	before := db.commits.Load()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := s.CacheGeneration()
			content := fmt.Sprintf("content %d", i)
			out, err := e.tryPublish(fmt.Sprintf("/g/a/%d/a-%d.pom", i, i), content)
			switch {
			case err != nil:
				errs[i] = err
			case out.SHA256 != sha(content):
				errs[i] = fmt.Errorf("published digest %s, want %s", out.SHA256, sha(content))
			case s.CacheGeneration() == gen:
				errs[i] = errors.New("the cache generation did not move before the publish returned")
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	commits := db.commits.Load() - before
	// The first batch took what was queued when it started (one write
	// at least); the others waited behind it and go maxN at a time.
	if limit := int64(1 + (writers+maxN-2)/maxN); commits > limit {
		t.Errorf("%d publishes took %d transactions, want at most %d", writers, commits, limit)
	}
	if st := s.BatchStats(); st.Writes != writers || st.Queued != 0 || st.Alone != 0 {
		t.Errorf("BatchStats = %+v, want %d writes, none queued or alone", st, writers)
	}
	// Then files with the same bytes as others, without holding: the
	// publishes of one digest take turns (its lock), and their references
	// add up across batches.
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.tryPublish(fmt.Sprintf("/g/b/%d/b-%d.pom", i, i), fmt.Sprintf("content %d", i%7)); err != nil {
				t.Errorf("shared %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	refs := map[string]int64{}
	for i := range writers {
		content := fmt.Sprintf("content %d", i%7)
		got := ok(s.CacheEntry(e.up, fmt.Sprintf("/g/b/%d/b-%d.pom", i, i)))(t)
		if got.SHA256 != sha(content) {
			t.Errorf("shared entry %d: sha256 %s, want %s", i, got.SHA256, sha(content))
		}
		refs[got.SHA256]++
	}
	for i := range writers {
		content := fmt.Sprintf("content %d", i)
		got := ok(s.CacheEntry(e.up, fmt.Sprintf("/g/a/%d/a-%d.pom", i, i)))(t)
		if got.SHA256 != sha(content) || got.Size != int64(len(content)) {
			t.Errorf("entry %d: sha256 %s size %d, want %s %d", i, got.SHA256, got.Size, sha(content), len(content))
		}
		if !exists(b.Path(got.SHA256)) {
			t.Errorf("entry %d: blob file missing", i)
		}
		refs[got.SHA256]++
	}
	noErr(t, s.db.View(func(tx kv.Tx) error {
		for sha, n := range refs {
			if v := tx.Bucket(bktBlobRefs).Get([]byte(sha)); v == nil || btoi(v) != n {
				t.Errorf("blob %s: %d references counted, %d entries", sha, btoi(v), n)
			}
		}
		return nil
	}))
	if got := s.CacheStats().Entries; got != 2*writers {
		t.Errorf("%d entries, want %d", got, 2*writers)
	}
}

// TestGroupCommitHoldBound: a batch stops taking writes once it has run
// for BatchMaxHold; the rest commit in the batches after it.
func TestGroupCommitHoldBound(t *testing.T) {
	const writers = 20
	s, db := openCounting(t, Options{BatchMaxEntries: 64, BatchMaxHold: time.Nanosecond})
	holdFirstBatch(s, writers)
	var sizes []int
	hold := s.batch.onBatch
	s.batch.onBatch = func(n int) { hold(n); sizes = append(sizes, n) }
	before := db.commits.Load()
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.updateBatched(false, func(tx kv.Tx) error {
				return tx.Bucket(bktMeta).Put(fmt.Appendf(nil, "test-%d", i), []byte{1})
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Each batch runs one write before its clock has run out: a
	// transaction each, however many the batch took.
	if got := db.commits.Load() - before; got != writers {
		t.Errorf("%d writes took %d transactions, want one each with a hold of 1ns", writers, got)
	}
	if len(sizes) < 2 || sizes[1] < 2 {
		t.Errorf("batch sizes %v: the writes did not queue behind the first", sizes)
	}
}

// TestGroupCommitFailureIsItsCallers: a function that fails in a shared
// transaction fails only its caller, with its own error and none of its
// writes; one that refuses before writing (unwritten) leaves the batch
// committing; a panic is its caller's; the others commit.
func TestGroupCommitFailureIsItsCallers(t *testing.T) {
	const writers = 12
	s, db := openCounting(t, Options{BatchMaxEntries: 64, BatchMaxHold: time.Hour})
	holdFirstBatch(s, writers)
	errBad := errors.New("this write fails after writing")
	key := func(i int) []byte { return fmt.Appendf(nil, "test-%d", i) }
	const (
		failing  = 3 // writes, then fails
		refusing = 5 // fails before writing
		panics   = 7 // writes, then panics
	)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	panicked := make([]any, writers)
	before := db.commits.Load()
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { panicked[i] = recover() }()
			errs[i] = s.updateBatched(false, func(tx kv.Tx) error {
				if i == refusing {
					return unwritten(notFound("Thing"))
				}
				if err := tx.Bucket(bktMeta).Put(key(i), []byte{1}); err != nil {
					return err
				}
				switch i {
				case failing:
					return errBad
				case panics:
					panic("boom")
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i := range writers {
		switch i {
		case failing:
			if errs[i] != errBad {
				t.Errorf("failing write: err %v, want its own", errs[i])
			}
		case refusing:
			if !errors.Is(errs[i], ErrNotFound) {
				t.Errorf("refusing write: err %v, want not found", errs[i])
			} else if _, marked := errs[i].(*unwrittenError); marked {
				t.Errorf("refusing write: the unwritten marker reached the caller")
			}
		case panics:
			if panicked[i] != "boom" {
				t.Errorf("panicking write: its caller recovered %v, want its panic", panicked[i])
			}
		default:
			if errs[i] != nil || panicked[i] != nil {
				t.Errorf("write %d: err %v, panic %v", i, errs[i], panicked[i])
			}
		}
	}
	noErr(t, s.db.View(func(tx kv.Tx) error {
		for i := range writers {
			stored := tx.Bucket(bktMeta).Get(key(i)) != nil
			if want := i != failing && i != refusing && i != panics; stored != want {
				t.Errorf("write %d: stored %v, want %v", i, stored, want)
			}
		}
		return nil
	}))
	// The failures ran again alone; the refusal did not.
	if st := s.BatchStats(); st.Alone != 2 || st.Queued != 0 {
		t.Errorf("BatchStats = %+v, want 2 writes run alone and none queued", st)
	}
	// The good writes: the batch that failed, then the one that committed
	// them (and the refusal), plus at most the first batch.
	if got := db.commits.Load() - before; got > 2 {
		t.Errorf("%d commits for %d good writes, want at most 2", got, writers-3)
	}
}

// TestGroupCommitTouchAndPurge: batched touches of a purged entry answer
// not found and leave the batch committing the others; a fill of a purged
// path replaces the purged entry in the batch as it does alone.
func TestGroupCommitTouchAndPurge(t *testing.T) {
	e := newBlobEnv(t)
	s := e.s
	for i := range 4 {
		e.publish(t, fmt.Sprintf("/g/%d.pom", i), fmt.Sprintf("v%d", i))
	}
	ok(s.PurgeUpstreamCache(e.up))(t)
	holdFirstBatch(s, 5)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.TouchCacheEntry(e.up, fmt.Sprintf("/g/%d.pom", i), time.Now())
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[4] = e.tryPublish("/g/0.pom", "v0 again")
	}()
	wg.Wait()
	for i := range 4 {
		if errs[i] != nil && !errors.Is(errs[i], ErrNotFound) {
			t.Errorf("touch %d: %v", i, errs[i])
		}
	}
	noErr(t, errs[4])
	got := ok(s.CacheEntry(e.up, "/g/0.pom"))(t)
	if got.SHA256 != sha("v0 again") {
		t.Errorf("the fill after the purge stored %s", got.SHA256)
	}
	if st := s.CacheStats(); st.Entries != 1 || st.Pending != 3 {
		t.Errorf("CacheStats = %+v, want 1 live entry and 3 purged", st)
	}
	if st := s.BatchStats(); st.Alone != 0 {
		t.Errorf("BatchStats = %+v: a touch of a purged entry made the batch run it alone", st)
	}
}

// TestAddDownloadsInChunks: a flush of more entries than downloadChunk is
// written in several transactions (none holds the writer for the whole
// flush), and every count arrives.
func TestAddDownloadsInChunks(t *testing.T) {
	const n = 2*downloadChunk + 10
	e, db := countingBlobEnv(t, Options{})
	s, uid := e.s, e.up
	var entries []CacheEntry
	var counts []DownloadCount
	at := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	for i := range n {
		rel := fmt.Sprintf("/g/%d.pom", i)
		entries = append(entries, CacheEntry{UpstreamID: uid, RelativePath: rel, SHA256: sha(rel), Size: 1})
		counts = append(counts, DownloadCount{UpstreamID: uid, Rel: rel, Count: int64(i + 1), Last: at})
	}
	noErr(t, s.PutCacheEntries(entries))
	before := db.commits.Load()
	noErr(t, s.AddDownloads(counts))
	if got := db.commits.Load() - before; got != 3 {
		t.Errorf("%d counts took %d transactions, want 3", n, got)
	}
	for i := range n {
		got := ok(s.CacheEntry(uid, fmt.Sprintf("/g/%d.pom", i)))(t)
		if got.DownloadsCount != int64(i+1) || got.DownloadedAt == nil || !got.DownloadedAt.Equal(at) {
			t.Fatalf("entry %d: %d downloads at %v, want %d at %v", i, got.DownloadsCount, got.DownloadedAt, i+1, at)
		}
	}
}

// TestGroupCommitLetsOtherWritersIn: while batched writes keep the writer
// busy without a pause, a write of its own (an admin change) commits after
// a few batches at most, not after the backlog: a batch holds bbolt's
// writer for one bounded transaction at a time, and bbolt's writer lock
// (a sync.Mutex) hands itself to a writer that has waited over a
// millisecond. The bound is counted in batches, not in time.
func TestGroupCommitLetsOtherWritersIn(t *testing.T) {
	boltOnly(t, "PostgreSQL runs the other writer's transaction beside the batches")
	const writers = 64
	s, _ := openCounting(t, Options{})
	defer keepWriting(t, writers, func(w, i int) error {
		return s.updateBatched(false, func(tx kv.Tx) error {
			return tx.Bucket(bktMeta).Put(fmt.Appendf(nil, "test-%d-%d", w, i%100), []byte{1})
		})
	})()
	// Wait until the batches run back to back.
	for s.BatchStats().Commits < 20 {
		runtime.Gosched()
	}
	for i := range 10 {
		before := s.BatchStats().Commits
		topGroup(t, s, fmt.Sprintf("g%d", i))
		if n := s.BatchStats().Commits - before; n > 4 {
			t.Fatalf("a write of its own waited for %d batches", n)
		}
	}
}

// keepWriting runs write(w, i) in a loop in each of n goroutines (w is the
// goroutine, i counts its writes) until the returned stop is called, which
// waits for them; a failed write fails t and ends its goroutine.
func keepWriting(t testing.TB, n int, write func(w, i int) error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := write(w, i); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}
