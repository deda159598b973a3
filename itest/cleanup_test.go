package itest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"registryd/internal/boltstore"
	"registryd/store"
	"registryd/store/blob"
)

// The real daemon has no clock a test can move, and a policy keeps files at
// least a day: so the files a run deletes are cached "40 days ago" by
// writing them into the stopped daemon's data directory with registryd's
// own store on a clock set back (blob file and index entry, as a fill of
// that day would have left them). Everything else goes through the API and
// the proxy of the running daemon.

// seedOld caches files of upstream as cached at `at`, and records a
// download at downloadedAt[path] when there is one. The daemon must be
// stopped.
func seedOld(t *testing.T, dataDir string, upstream int64, at time.Time, files map[string][]byte, downloadedAt map[string]time.Time) {
	t.Helper()
	key, err := store.LoadOrCreateSecret(filepath.Join(dataDir, "secrets.key"), 32)
	if err != nil {
		t.Fatal(err)
	}
	st, err := boltstore.Open(dataDir, store.Options{SecretKey: key, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	blobs, err := blob.Open(dataDir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for path, body := range files {
		w, err := blobs.Create()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(body); err != nil {
			t.Fatal(err)
		}
		dg, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Publish(blobs, w, dg, store.CacheEntry{UpstreamID: upstream, RelativePath: "/" + path,
			ContentType: "application/java-archive", CheckedAt: at}); err != nil {
			t.Fatal(err)
		}
		if when, ok := downloadedAt[path]; ok {
			if err := st.AddDownloads([]store.DownloadCount{{UpstreamID: upstream, Rel: "/" + path, Count: 1, Last: when}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// blobFile is where the blob of body lives (DESIGN.md: blobs/sha256/ab/cd/abcd…).
func blobFile(dataDir string, body []byte) string {
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	return filepath.Join(dataDir, "blobs", "sha256", sha[:2], sha[2:4], sha)
}

func TestCleanupPolicyRunNow(t *testing.T) {
	up := newPxUpstream(t)
	fresh := map[string][]byte{
		"org/example/fresh/1.0/fresh-1.0.jar": pxBody("fresh-1", 3000),
		"org/example/fresh/1.0/fresh-1.0.pom": pxBody("fresh-2", 700),
	}
	for p, b := range fresh {
		up.set(p, pxFile{body: b})
	}
	d := Start(t, nil)
	f := d.Fix(t)
	group := f.Group("acme", 0, "private")
	reg := f.Registry(group, "main")
	// Cached files never need a revalidation: a hit of a kept file is
	// served from the cache alone.
	upstream := f.Upstream(reg, up.URL, map[string]any{"cache_validity_hours": 0})
	for p, b := range fresh {
		if r := d.pxGet(t, reg, p, tokenHeader(rootToken)...).Expect(t, 200); string(r.Body) != string(b) {
			t.Fatalf("%s: wrong body", p)
		}
	}

	// Three files cached 40 days ago; one of them downloaded 2 days ago.
	d.Stop()
	now := time.Now().UTC()
	old := map[string][]byte{
		"org/example/old/1.0/old-1.0.jar":           pxBody("old-1", 5000),
		"org/example/old/1.0/old-1.0.pom":           pxBody("old-2", 900),
		"org/example/old-used/1.0/old-used-1.0.jar": pxBody("old-3", 1200),
	}
	seedOld(t, d.DataDir, upstream, now.Add(-40*24*time.Hour), old,
		map[string]time.Time{"org/example/old-used/1.0/old-used-1.0.jar": now.Add(-48 * time.Hour)})
	d.Restart()
	entriesPath := vr("/upstreams/%d/cache_entries", upstream)
	if r := d.Do("GET", entriesPath, rootToken, nil).Expect(t, 200); r.Header.Get("X-Total") != "5" {
		t.Fatalf("%s entries before the run: %s", r.Header.Get("X-Total"), r.Body)
	}
	wantGone := []string{"/org/example/old/1.0/old-1.0.jar", "/org/example/old/1.0/old-1.0.pom"}
	wantSize := len(old["org/example/old/1.0/old-1.0.jar"]) + len(old["org/example/old/1.0/old-1.0.pom"])

	policyPath := fmt.Sprintf("/groups/%d/-/virtual_registries/cleanup/policy", group)
	created := d.Do("POST", policyPath, rootToken, `{"keep_n_days_after_download":30,"cadence":14}`).Expect(t, 201).Map(t)
	if created["status"] != "scheduled" || created["enabled"] != false || created["last_run_at"] != nil {
		t.Fatalf("created %v", created)
	}
	wantTimestamps(t, created, "next_run_at", "created_at", "updated_at")
	d.Do("POST", policyPath, rootToken, `{}`).Expect(t, 400)

	// The dry run names what would go, and deletes nothing.
	dry := d.Do("GET", policyPath+"/dry_run?per_page=1", rootToken, nil).Expect(t, 200)
	dm := dry.Map(t)
	entries := dm["entries"].([]any)
	if dm["deleted_entries_count"] != float64(2) || dm["deleted_size"] != float64(wantSize) || len(entries) != 1 ||
		entries[0].(map[string]any)["relative_path"] != wantGone[0] || dry.Header.Get("X-Total") != "2" {
		t.Fatalf("dry run: %s %v", dry.Body, dry.Header)
	}
	if r := d.Do("GET", entriesPath, rootToken, nil).Expect(t, 200); r.Header.Get("X-Total") != "5" {
		t.Fatal("the dry run deleted entries")
	}

	// Run now: 202 with the policy running; then it ends by itself.
	run := d.Do("POST", policyPath+"/run", rootToken, nil).Expect(t, 202).Map(t)
	if run["status"] != "running" {
		t.Fatalf("run now: %v", run)
	}
	var p map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		p = d.Do("GET", policyPath, rootToken, nil).Expect(t, 200).Map(t)
		if p["status"] != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not end: %v", p)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	// Another run now so soon (cleanup.run_now_interval, 1m from the last
	// run's start) is refused, with the seconds to wait. Until the run has
	// written its audit event, which comes after its end in the policy, it
	// is still running here: 409.
	var again *Resp
	eventually(t, 30*time.Second, "the run released", func() bool {
		again = d.Do("POST", policyPath+"/run", rootToken, nil)
		return again.Status != 409
	})
	again.Expect(t, 429)
	if ra := again.Header.Get("Retry-After"); ra == "" || ra == "0" ||
		!strings.HasPrefix(string(again.Body), `{"message":"429 Too Many Requests - the cleanup policy's last run started less than 1m ago; retry after `+ra+` seconds"}`) {
		t.Fatalf("second run now: %s (Retry-After %q)", again.Body, ra)
	}
	if p["status"] != "scheduled" || p["last_run_deleted_entries_count"] != float64(2) ||
		p["last_run_deleted_size"] != float64(wantSize) || p["failure_message"] != nil {
		t.Fatalf("after the run: %v", p)
	}
	metrics := p["last_run_detailed_metrics"].(map[string]any)["maven"].(map[string]any)
	if metrics["deleted_entries_count"] != float64(2) || metrics["deleted_size"] != float64(wantSize) {
		t.Fatalf("detailed metrics %v", p["last_run_detailed_metrics"])
	}
	wantTimestamps(t, p, "last_run_at", "next_run_at")
	last, _ := time.Parse(time.RFC3339Nano, p["last_run_at"].(string))
	next, _ := time.Parse(time.RFC3339Nano, p["next_run_at"].(string))
	if next.Sub(last) != 14*24*time.Hour {
		t.Fatalf("next run %s after the last, want the cadence of 14 days", next.Sub(last))
	}

	// The cache entries API no longer lists them; the rest is still served.
	var left []map[string]any
	d.Do("GET", entriesPath, rootToken, nil).Expect(t, 200).JSON(t, &left)
	var paths []string
	for _, e := range left {
		paths = append(paths, e["relative_path"].(string))
	}
	for _, g := range wantGone {
		if strings.Contains(strings.Join(paths, " "), g) {
			t.Fatalf("%s still listed: %v", g, paths)
		}
	}
	if len(left) != 3 {
		t.Fatalf("left %v", paths)
	}
	kept := "org/example/old-used/1.0/old-used-1.0.jar"
	if r := d.pxGet(t, reg, kept, tokenHeader(rootToken)...).Expect(t, 200); string(r.Body) != string(old[kept]) || up.calls(kept) != 0 {
		t.Fatalf("the kept old file: %d upstream calls", up.calls(kept))
	}
	// The collector removes the deleted files' blobs.
	for _, g := range wantGone {
		file := blobFile(d.DataDir, old[strings.TrimPrefix(g, "/")])
		for deadline := time.Now().Add(30 * time.Second); ; {
			if _, err := os.Stat(file); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the blob of %s is still on disk", g)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := os.Stat(blobFile(d.DataDir, old[kept])); err != nil {
		t.Fatalf("the kept file's blob: %v", err)
	}

	// The run is audited, with its figures and its author.
	var evs []map[string]any
	d.Do("GET", fmt.Sprintf("/groups/%d/audit_events", group), rootToken, nil).Expect(t, 200).JSON(t, &evs)
	if len(evs) != 1 || evs[0]["event_name"] != "virtual_registries_cleanup_policy_run" {
		t.Fatalf("audit events %v", evs)
	}
	details := evs[0]["details"].(map[string]any)
	if msg, _ := details["custom_message"].(string); !strings.HasPrefix(msg,
		fmt.Sprintf("Cleanup policy run asked for by Administrator: deleted 2 cache entries (%d bytes)", wantSize)) ||
		details["target_type"] != "VirtualRegistries::Cleanup::Policy" || details["author_name"] != "Administrator" {
		t.Fatalf("audit details %v", details)
	}
	// And counted.
	m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
	for _, want := range []string{
		`registryd_cleanup_runs_total{outcome="success"} 1`,
		`registryd_cleanup_deleted_entries_total 2`,
		fmt.Sprintf(`registryd_cleanup_deleted_bytes_total %d`, wantSize),
		`registryd_cleanup_runs_in_progress 0`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Nothing more would go now.
	if dm := d.Do("GET", policyPath+"/dry_run", rootToken, nil).Expect(t, 200).Map(t); dm["deleted_entries_count"] != float64(0) {
		t.Fatalf("dry run after the run: %v", dm)
	}
	d.Do("DELETE", policyPath, rootToken, nil).Expect(t, 204)
	d.Do("GET", policyPath, rootToken, nil).Expect(t, 404)
	noServerErrors(t, d)
}
