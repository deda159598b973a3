package itest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"registryd/store/blob"
	"registryd/store/objects"
)

// TestScrubHealsAFlippedByte: a byte of a stored blob flips on disk; a
// scrub cycle asked for over the admin API finds it, names it in its report
// and metrics, quarantines the file and drops the entry, and the next
// download fetches the file from its upstream again, while the other
// artifact stays a hit.
func TestScrubHealsAFlippedByte(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	const rotten, sound = "com/acme/rot/1.0/rot-1.0.jar", "com/acme/ok/1.0/ok-1.0.jar"
	rottenBody, soundBody := pxBody("rot", 300<<10), pxBody("ok", 200<<10)
	up.set(rotten, pxFile{body: rottenBody})
	up.set(sound, pxFile{body: soundBody})
	f.Upstream(reg, up.URL, nil)
	for _, p := range []string{rotten, sound} {
		d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		// The sidecar answers from the stored entry: after it, the file is
		// in the index.
		d.pxGet(t, reg, p+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	}
	sum := sha256.Sum256(rottenBody)
	sha := hex.EncodeToString(sum[:])
	path := filepath.Join(d.DataDir, "blobs", "sha256", sha[0:2], sha[2:4], sha)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}

	_, userTok := f.User("dev", false)
	d.Do("GET", "/admin/scrub", userTok, nil).Expect(t, 403)
	d.Do("POST", "/admin/scrub", "", nil).Expect(t, 401)
	d.Do("POST", "/admin/scrub", rootToken, nil).Expect(t, 202)

	var rep struct {
		Running bool `json:"running"`
		Last    *struct {
			FinishedAt     *time.Time `json:"finished_at"`
			Checked        int64      `json:"checked"`
			BytesHashed    int64      `json:"bytes_hashed"`
			EntriesDropped int64      `json:"entries_dropped"`
			Corrupt        []struct {
				SHA256      string `json:"sha256"`
				Tier        string `json:"tier"`
				Quarantined string `json:"quarantined"`
				Entries     []struct {
					RelativePath string `json:"relative_path"`
				} `json:"entries"`
			} `json:"corrupt"`
			Missing []any `json:"missing"`
		} `json:"last"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.Do("GET", "/admin/scrub", rootToken, nil).Expect(t, 200).JSON(t, &rep)
		if !rep.Running && rep.Last != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scrub cycle did not finish: %+v", rep)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := rep.Last
	if l.FinishedAt == nil || l.Checked != 2 || l.BytesHashed != int64(len(rottenBody)+len(soundBody)) || l.EntriesDropped != 1 ||
		len(l.Corrupt) != 1 || len(l.Missing) != 0 {
		t.Fatalf("report = %+v", *l)
	}
	c := l.Corrupt[0]
	if c.SHA256 != sha || c.Tier != "local" || c.Quarantined != filepath.Join(d.DataDir, "quarantine", sha) ||
		len(c.Entries) != 1 || c.Entries[0].RelativePath != "/"+rotten {
		t.Fatalf("finding = %+v", c)
	}
	if q, err := os.ReadFile(c.Quarantined); err != nil || !bytes.Equal(q, b) {
		t.Fatalf("the quarantined file: %v", err)
	}
	metrics := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
	for series, want := range map[string]float64{
		"registryd_scrub_blobs_checked_total": 2, "registryd_scrub_blobs_corrupt_total": 1,
		"registryd_scrub_blobs_missing_total": 0, "registryd_scrub_entries_dropped_total": 1,
		"registryd_scrub_bytes_hashed_total": float64(len(rottenBody) + len(soundBody)),
	} {
		if n := metricValue(t, metrics, series); n != want {
			t.Errorf("%s = %v, want %v", series, n, want)
		}
	}
	if n := metricValue(t, metrics, "registryd_scrub_last_completed_timestamp_seconds"); n < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last completed = %v", n)
	}
	if !bytes.Contains([]byte(d.Logs()), []byte(sha)) {
		t.Error("no log line names the bad blob")
	}

	// The self-heal: the upstream's bytes again, fetched anew; the other
	// file is still a hit.
	got := d.pxGet(t, reg, rotten, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if !bytes.Equal(got.Body, rottenBody) {
		t.Fatal("the download after the scrub does not have the upstream's bytes")
	}
	if n := up.calls(rotten); n != 2 {
		t.Fatalf("upstream GETs of the healed file = %d, want 2", n)
	}
	if got := d.pxGet(t, reg, sound, "PRIVATE-TOKEN", rootToken).Expect(t, 200); !bytes.Equal(got.Body, soundBody) || up.calls(sound) != 1 {
		t.Fatalf("the sound file: %d upstream GETs", up.calls(sound))
	}
}

// TestClusterScrubHealsARottenObject: a byte of an object in the bucket
// flips; a scrub cycle on node B (which takes the bucket's scrub) deletes
// the object and drops its entry, and the next download through node A
// fetches the file from its upstream again and uploads it anew.
func TestClusterScrubHealsARottenObject(t *testing.T) {
	c := startCluster(t, 2, nil)
	a, b := c.nodes[0], c.nodes[1]
	f := a.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("rot", 300<<10)
	up.set(pxJar, pxFile{body: body})
	f.Upstream(reg, up.URL, nil)
	a.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	a.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)

	obj, err := objects.NewS3(objects.S3Options{Endpoint: c.s3.Endpoint, Bucket: c.env["REGISTRYD_BLOBS_S3_BUCKET"],
		Region: "us-east-1", AccessKeyID: c.s3.AccessKey, SecretAccessKey: c.s3.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	ctx := context.Background()
	rotten := bytes.Clone(body)
	rotten[1000] ^= 0x40
	if err := obj.Put(ctx, blob.ObjectKey(sha), bytes.NewReader(rotten), int64(len(rotten))); err != nil {
		t.Fatal(err)
	}

	b.Do("POST", "/admin/scrub", rootToken, nil).Expect(t, 202)
	var rep struct {
		Running bool `json:"running"`
		Last    *struct {
			Bucket  bool `json:"bucket"`
			Corrupt []struct {
				SHA256  string `json:"sha256"`
				Tier    string `json:"tier"`
				Entries []struct {
					RelativePath string `json:"relative_path"`
				} `json:"entries"`
			} `json:"corrupt"`
		} `json:"last"`
	}
	eventually(t, 30*time.Second, "the scrub cycle on B ends", func() bool {
		b.Do("GET", "/admin/scrub", rootToken, nil).Expect(t, 200).JSON(t, &rep)
		return !rep.Running && rep.Last != nil
	})
	if l := rep.Last; !l.Bucket || len(l.Corrupt) != 1 || l.Corrupt[0].SHA256 != sha || l.Corrupt[0].Tier != "bucket" ||
		len(l.Corrupt[0].Entries) != 1 || l.Corrupt[0].Entries[0].RelativePath != "/"+pxJar {
		t.Fatalf("report = %+v", rep.Last)
	}
	if n := metricSum(t, b, "registryd_scrub_blobs_corrupt_total"); n != 1 {
		t.Fatalf("B's corrupt blobs = %v", n)
	}
	// The entry is gone on every node: A (which still has a sound local
	// copy) fetches the file from the upstream again.
	eventually(t, 10*time.Second, "A fetches the file anew", func() bool {
		got := a.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		if !bytes.Equal(got.Body, body) {
			t.Fatal("A served other bytes than the upstream's")
		}
		return up.calls(pxJar) == 2
	})
	a.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	r, err := obj.Get(ctx, blob.ObjectKey(sha))
	if err != nil {
		t.Fatalf("the object after the heal: %v", err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the object after the heal: %d bytes, %v", len(got), err)
	}
}

// TestScrubResumesAfterARestart: a cycle on a small budget is cut short by
// a stop; the next start continues it from the cursor the stop saved, and
// the cycle ends there without checking again what was checked.
func TestScrubResumesAfterARestart(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_SCRUB_BYTES_PER_SECOND": "64KiB"})
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	f.Upstream(reg, up.URL, nil)
	const n = 3
	for i := range n {
		p := "com/acme/slow/1." + itoa(int64(i)) + "/slow-1." + itoa(int64(i)) + ".jar"
		up.set(p, pxFile{body: pxBody("slow"+itoa(int64(i)), 128<<10)})
		d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		d.pxGet(t, reg, p+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	}
	type cycle struct {
		Resumed bool  `json:"resumed"`
		Checked int64 `json:"checked"`
		Error   string
	}
	var rep struct {
		Running bool   `json:"running"`
		Current *cycle `json:"current"`
		Last    *cycle `json:"last"`
	}
	d.Do("POST", "/admin/scrub", rootToken, nil).Expect(t, 202)
	// 128 KiB a blob at 64 KiB/s: the first blob is done after about a
	// second, the cycle after about five.
	eventually(t, 20*time.Second, "the first blob is checked", func() bool {
		d.Do("GET", "/admin/scrub", rootToken, nil).Expect(t, 200).JSON(t, &rep)
		return rep.Running && rep.Current != nil && rep.Current.Checked >= 2
	})
	d.Stop()
	if !strings.Contains(d.Logs(), "scrub: cycle stopped") {
		t.Error("no log line of the cycle the stop cut short")
	}
	d.start()
	eventually(t, 30*time.Second, "the resumed cycle ends", func() bool {
		d.Do("GET", "/admin/scrub", rootToken, nil).Expect(t, 200).JSON(t, &rep)
		return !rep.Running && rep.Last != nil
	})
	// The stop came while the second blob was being read (Checked counts a
	// blob when its read begins): the resumed cycle reads it again, and
	// the third.
	if !rep.Last.Resumed || rep.Last.Checked < 1 || rep.Last.Checked > 2 || rep.Last.Error != "" {
		t.Fatalf("resumed cycle = %+v", *rep.Last)
	}
	if !strings.Contains(d.Logs(), "scrub: cycle done") {
		t.Error("no log line of the resumed cycle")
	}
}
