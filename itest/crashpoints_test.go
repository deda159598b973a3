package itest

// Crash-point replay (issue 26): a power cut loses what was written but not
// fsynced, which kill -9 never does (the page cache survives a killed
// process). The test records every file write, fsync, rename, link, unlink
// and mkdir registryd makes during a workload (strace, through
// internal/crashimage), rebuilds the data directory a power cut would
// leave at every fsync and at random points between them, starts registryd
// on each image and checks what registryd promises:
//
//   - it starts;
//   - every admin write acknowledged before the cut is there (each is one
//     index transaction, fsynced before the answer);
//   - every cache entry acknowledged as stored before the cut (listed by
//     the API) is there, and no entry whose delete was acknowledged is;
//   - every entry in the index is served, with the upstream down, with
//     exactly the upstream's bytes: it points at a whole blob with the right
//     digest.
//
// At each fsync the image is strict (a name survives only once its
// directory was fsynced, POSIX's promise); between them it is torn (any
// subset of the unsynced writes survives, names in the order they were
// made, as ext4's and XFS's journals give).

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"registryd/internal/crashimage"
)

// crashUpstream serves fixed files, or 503 for everything once down.
type crashUpstream struct {
	files map[string][]byte
	down  atomic.Bool
	srv   *httptest.Server
}

func newCrashUpstream(t *testing.T, files map[string][]byte) *crashUpstream {
	u := &crashUpstream{files: files}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, ok := u.files[strings.TrimPrefix(r.URL.Path, "/maven2/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/java-archive")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method != http.MethodHead {
			w.Write(body)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// crashFacts is what the workload had acknowledged, and when.
type crashFacts struct {
	groups, registries, upstreams []crashAck
	token                         string
	tokenAck                      time.Time
	// stored: when each path was first listed as a cache entry;
	// deleting/deleted: when its delete was sent and answered.
	stored, deleting, deleted map[string]time.Time
}

type crashAck struct {
	id  int64
	ack time.Time
}

func TestCrashPoints(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		msg := "strace is not installed (apt-get install strace): the crash-point replay needs it"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (.ci/packages lists it: CI must not skip this test)")
		}
		t.Skip(msg)
	}
	files := map[string][]byte{}
	var paths []string
	// Sizes on both sides of the small-file path (held in memory, stored
	// after the answer) and of a write buffer.
	for i, size := range []int{700, 5 << 10, 60 << 10, 90 << 10, 300 << 10, 1<<20 + 17, 2 << 10, 130 << 10} {
		p := fmt.Sprintf("org/crash/a%d/1.0/a%d-1.0.jar", i, i)
		files[p] = pxBody(fmt.Sprintf("crash-%d-", i), size)
		paths = append(paths, p)
	}
	up := newCrashUpstream(t, files)

	trace := filepath.Join(t.TempDir(), "strace.log")
	d := StartWrapped(t, nil, append([]string{strace}, crashimage.StraceArgs(trace)...)...)
	root, err := filepath.EvalSymlinks(d.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	facts := crashWorkload(t, d, up, paths)
	stopTraced(t, d)

	raw, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := crashimage.Parse(bytes.NewReader(raw), root)
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REGISTRYD_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 26))
	t.Logf("%d file operations traced; seed %d (REGISTRYD_CRASH_SEED)", len(ops), seed)
	defer func() {
		if t.Failed() {
			keepCrashArtifacts(t, raw, seed)
		}
	}()

	kinds := map[string]int{}
	for _, op := range ops {
		if op.Kind == crashimage.Sync {
			switch rel, _ := filepath.Rel(root, op.Path); {
			case rel == "registry.db":
				kinds["index"]++
			case strings.HasPrefix(rel, "tmp/"):
				kinds["blob files"]++
			default:
				kinds["directories and others"]++
			}
		}
	}
	t.Logf("fsyncs: %v", kinds)
	// The images run registryd without the race detector: it starts a
	// hundred times and the race-enabled run above traced the workload.
	bin := plainBinary(t)
	strict := crashimage.New(root, true)
	ordered := crashimage.New(root, false)
	syncs, torn := 0, 0
	sinceSync := 0
	for i, op := range ops {
		for _, m := range []*crashimage.Model{strict, ordered} {
			if err := m.Apply(op); err != nil {
				t.Fatalf("replaying the trace: %v", err)
			}
		}
		cut := time.Unix(0, int64(op.Time*1e9))
		switch {
		case op.Kind == crashimage.Sync || op.Kind == crashimage.SyncAll:
			syncs++
			sinceSync = 0
			checkCrashImage(t, bin, fmt.Sprintf("sync-%03d-line-%d", syncs, op.Line), strict, nil, cut, up, facts)
		default:
			sinceSync++
			// About one torn image per stretch between syncs, at a random
			// op of it.
			if i+1 < len(ops) && rng.IntN(sinceSync+2) == 0 {
				torn++
				checkCrashImage(t, bin, fmt.Sprintf("torn-%03d-line-%d", torn, op.Line), ordered, rng, cut, up, facts)
			}
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("checked %d images at fsyncs and %d torn images between them", syncs, torn)
	if syncs < 20 {
		t.Fatalf("only %d fsyncs traced: the workload did not reach the index and blobs", syncs)
	}
}

// crashWorkload makes admin writes, fills and deletes, one at a time,
// recording when each was acknowledged.
func crashWorkload(t *testing.T, d *Daemon, up *crashUpstream, paths []string) *crashFacts {
	f := &crashFacts{stored: map[string]time.Time{}, deleting: map[string]time.Time{}, deleted: map[string]time.Time{}}
	fix := d.Fix(t)
	group := fix.Group("crash", 0, "private")
	f.groups = append(f.groups, crashAck{group, time.Now()})
	reg := fix.Registry(group, "main")
	f.registries = append(f.registries, crashAck{reg, time.Now()})
	upstream := fix.Upstream(reg, up.srv.URL+"/maven2", nil)
	f.upstreams = append(f.upstreams, crashAck{upstream, time.Now()})
	_, f.token = fix.User("crashuser", true)
	f.tokenAck = time.Now()
	for i, p := range paths {
		d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		deadline := time.Now().Add(30 * time.Second)
		for !slicesContain(crashEntries(t, d, upstream), "/"+p) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never listed as a cache entry", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
		f.stored[p] = time.Now()
		if i == 3 {
			g := fix.Group("crash-two", group, "private")
			f.groups = append(f.groups, crashAck{g, time.Now()})
		}
	}
	for _, p := range paths[1:3] {
		f.deleting[p] = time.Now()
		d.Do("DELETE", "/virtual_registries/packages/maven/cache_entries/"+crashEntryID(upstream, p), rootToken, nil).Expect(t, 204)
		f.deleted[p] = time.Now()
	}
	reg2 := fix.Registry(group, "second")
	f.registries = append(f.registries, crashAck{reg2, time.Now()})
	return f
}

// crashEntryID is a cache entry's API id: base64url with padding of
// "<upstream id> /<path>".
func crashEntryID(upstream int64, path string) string {
	return base64.URLEncoding.EncodeToString(fmt.Appendf(nil, "%d /%s", upstream, path))
}

// crashEntry is the part of a cache entry the checks read.
type crashEntry struct {
	Path string `json:"relative_path"`
	SHA1 string `json:"file_sha1"`
	Size int64  `json:"size"`
}

func crashEntryList(t *testing.T, d *Daemon, upstream int64) []crashEntry {
	t.Helper()
	var out []crashEntry
	d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d/cache_entries?per_page=100", upstream),
		rootToken, nil).Expect(t, 200).JSON(t, &out)
	return out
}

func crashEntries(t *testing.T, d *Daemon, upstream int64) []string {
	var paths []string
	for _, e := range crashEntryList(t, d, upstream) {
		paths = append(paths, e.Path)
	}
	return paths
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// stopTraced stops the daemon strace runs: SIGTERM to registryd itself
// (strace would detach and leave it running), then the harness's Stop
// collects strace, which exits with it.
func stopTraced(t *testing.T, d *Daemon) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", d.cmd.Process.Pid, d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(raw))[0])
	if err != nil {
		t.Fatalf("registryd's pid under strace: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	d.Stop()
}

// checkCrashImage writes the image m gives now, starts registryd on it and
// checks every promise that holds for a cut at cut.
func checkCrashImage(t *testing.T, bin, name string, m *crashimage.Model, torn *rand.Rand, cut time.Time, up *crashUpstream, f *crashFacts) {
	t.Run(name, func(t *testing.T) {
		dir := t.TempDir()
		if err := m.Image(dir, torn); err != nil {
			t.Fatal(err)
		}
		up.down.Store(true)
		defer up.down.Store(false)
		d := startIn(t, dir, nil, nil, bin)
		defer d.Stop()
		before := func(ack time.Time) bool { return !ack.IsZero() && ack.Before(cut) }
		for _, g := range f.groups {
			if before(g.ack) {
				d.Do("GET", fmt.Sprintf("/groups/%d", g.id), rootToken, nil).Expect(t, 200)
			}
		}
		for _, r := range f.registries {
			if before(r.ack) {
				d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d", r.id), rootToken, nil).Expect(t, 200)
			}
		}
		if before(f.tokenAck) {
			d.Do("GET", "/user", f.token, nil).Expect(t, 200)
		}
		upstream, reg := f.upstreams[0], f.registries[0]
		if d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d", upstream.id), rootToken, nil).Status != 200 {
			if before(upstream.ack) {
				t.Fatalf("upstream %d, acknowledged before the cut, is gone", upstream.id)
			}
			return
		}
		listed := map[string]crashEntry{}
		for _, e := range crashEntryList(t, d, upstream.id) {
			listed[strings.TrimPrefix(e.Path, "/")] = e
		}
		for p, at := range f.stored {
			_, ok := listed[p]
			if before(at) && !ok && !before(f.deleting[p]) {
				t.Errorf("%s, listed as stored before the cut, is gone", p)
			}
			if before(f.deleted[p]) && ok {
				t.Errorf("%s, whose delete was acknowledged before the cut, is back", p)
			}
		}
		for p, e := range listed {
			want, ok := up.files[p]
			if !ok {
				t.Errorf("an entry for %s, which the upstream never had", p)
				continue
			}
			sum := sha1.Sum(want)
			if e.SHA1 != hex.EncodeToString(sum[:]) || e.Size != int64(len(want)) {
				t.Errorf("%s: entry says sha1 %s size %d, the upstream's is %x size %d", p, e.SHA1, e.Size, sum, len(want))
			}
			r := d.pxGet(t, reg.id, p, "PRIVATE-TOKEN", rootToken)
			if r.Status != 200 || !bytes.Equal(r.Body, want) {
				t.Errorf("%s: served status %d, %d bytes (upstream down): the entry's blob is not whole", p, r.Status, len(r.Body))
			}
		}
	})
}

// keepCrashArtifacts saves a failing run's trace and seed for a rerun.
func keepCrashArtifacts(t *testing.T, trace []byte, seed uint64) {
	dir := os.Getenv("REGISTRYD_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("out", "crashpoints")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "strace.log"), trace, 0o644)
	meta, _ := json.Marshal(map[string]any{"seed": seed, "test": t.Name()})
	_ = os.WriteFile(filepath.Join(dir, "seed.json"), meta, 0o644)
	t.Logf("the trace and seed are kept in %s", dir)
}
