package itest

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A full data volume breaks nothing (docs/operations.md, "When the disk is
// full"): the real daemon on a volume made full by the test itself.

// diskUpstream serves files with a Content-Length, and, under stream/,
// chunked (no length announced), so that only a write can tell that the
// file does not fit.
func diskUpstream(t *testing.T, files map[string][]byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rel := strings.TrimPrefix(r.URL.Path, "/maven2/")
		chunked := strings.HasPrefix(rel, "stream/")
		b, ok := files[strings.TrimPrefix(rel, "stream/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		sum := sha1.Sum(b)
		w.Header().Set("Content-Type", "application/java-archive")
		w.Header().Set("X-Checksum-Sha1", hex.EncodeToString(sum[:]))
		if chunked {
			for off := 0; off < len(b); off += 64 << 10 {
				w.Write(b[off:min(len(b), off+64<<10)])
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/maven2"
}

// diskGet downloads path and checks that the client got every byte of want.
func diskGet(t *testing.T, d *Daemon, reg int64, path string, want []byte) {
	t.Helper()
	r := d.pxGet(t, reg, path, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if !bytes.Equal(r.Body, want) {
		t.Fatalf("%s: got %d bytes, want the %d of the file", path, len(r.Body), len(want))
	}
	sum := sha1.Sum(want)
	if got := r.Header.Get("X-Checksum-Sha1"); got != "" && got != hex.EncodeToString(sum[:]) {
		t.Fatalf("%s: X-Checksum-Sha1 %s", path, got)
	}
}

// readiness returns /-/readiness's cache part; it must stay 200.
func readiness(t *testing.T, d *Daemon) (filling bool, reason string) {
	t.Helper()
	var body struct {
		Status string `json:"status"`
		Cache  struct {
			Filling bool   `json:"filling"`
			Reason  string `json:"reason"`
		} `json:"cache"`
	}
	d.Do("GET", "/-/readiness", "", nil).Expect(t, 200).JSON(t, &body)
	if body.Status != "ok" {
		t.Fatalf("readiness status %q", body.Status)
	}
	return body.Cache.Filling, body.Cache.Reason
}

// waitFilling polls readiness until it says filling is want (the daemon
// reads the volume's figures at most once a second).
func waitFilling(t *testing.T, d *Daemon, want bool) string {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		filling, reason := readiness(t, d)
		if filling == want {
			return reason
		}
		if time.Now().After(end) {
			t.Fatalf("readiness did not say filling=%v within 30s (reason %q)", want, reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noFiles fails when dir holds any regular file.
func noFiles(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			t.Errorf("%s is left", p)
		}
		return nil
	})
}

func diskMetric(t *testing.T, d *Daemon, name string, labels map[string]string) float64 {
	t.Helper()
	m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
	if labels == nil {
		return metricValue(t, m, name)
	}
	v, ok := metricSample(t, m, name, labels)
	if !ok {
		t.Fatalf("/metrics lacks %s%v", name, labels)
	}
	return v
}

// TestDiskFullTmpfs runs the daemon on a 16 MiB tmpfs mounted in a user and
// mount namespace of its own (no root needed where unprivileged user
// namespaces are allowed): real ENOSPC from the kernel, real statfs figures.
// The test fills the volume with a ballast file (through /proc/PID/root,
// the daemon's view of its mounts) and removes it to give the space back.
func TestDiskFullTmpfs(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("disk-full test on a tmpfs needs unshare(1) (util-linux); not found")
	}
	probe := t.TempDir()
	if out, err := exec.Command(unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
		`mount -t tmpfs -o size=1m tmpfs "$0"`, probe).CombinedOutput(); err != nil {
		t.Skipf("disk-full test on a tmpfs: this machine cannot mount a tmpfs in a user namespace (%v: %s)",
			err, bytes.TrimSpace(out))
	}
	d := StartWrapped(t, nil, unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
		`mount -t tmpfs -o size=16m tmpfs "$REGISTRYD_DATA_DIR" && exec "$@"`, "sh")
	data := fmt.Sprintf("/proc/%d/root%s", d.cmd.Process.Pid, d.DataDir)
	var st syscall.Statfs_t
	if err := syscall.Statfs(data, &st); err != nil || st.Blocks*uint64(st.Bsize) != 16<<20 {
		t.Fatalf("the data dir is not the 16 MiB tmpfs (%v, %d blocks)", err, st.Blocks)
	}
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	big := pxBody("big", 6<<20+11)
	small := pxBody("small", 200<<10)
	up := diskUpstream(t, map[string][]byte{"g/big/1/big-1.jar": big, "g/small/1/small-1.jar": small})
	f.Upstream(reg, up, nil)

	ballast := filepath.Join(data, "ballast")
	// fill writes the ballast until the volume has at most leave bytes
	// free (0: until a write fails).
	fill := func(leave int64) {
		t.Helper()
		os.Remove(ballast)
		bf, err := os.Create(ballast)
		if err != nil {
			t.Fatal(err)
		}
		defer bf.Close()
		chunk := make([]byte, 64<<10)
		for {
			var st syscall.Statfs_t
			if err := syscall.Statfs(data, &st); err != nil {
				t.Fatal(err)
			}
			free := int64(st.Bavail) * int64(st.Bsize)
			if free <= leave {
				return
			}
			n := min(int64(len(chunk)), free-leave)
			if _, err := bf.Write(chunk[:n]); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					return
				}
				t.Fatal(err)
			}
		}
	}

	// 1. The volume is full: a miss streams uncached; registryd stays ready
	// and says why it does not fill.
	fill(0)
	reason := waitFilling(t, d, false)
	if !strings.HasPrefix(reason, "data volume full: ") {
		t.Fatalf("reason %q", reason)
	}
	diskGet(t, d, reg, "g/big/1/big-1.jar", big)
	diskGet(t, d, reg, "g/small/1/small-1.jar", small)
	if got := diskMetric(t, d, "registryd_cache_filling", nil); got != 0 {
		t.Fatalf("registryd_cache_filling %v", got)
	}
	if got := diskMetric(t, d, "registryd_cache_fill_disk_full_total", map[string]string{"stage": "before"}); got != 2 {
		t.Fatalf("disk full (before) = %v, want 2", got)
	}
	// Admin writes answer 507 when the index cannot take them, never 500
	// (bbolt reuses free pages of its file, so some may still succeed).
	refused := 0
	for i := range 20 {
		r := d.Do("POST", "/groups", rootToken, map[string]any{"name": "g" + strconv.Itoa(i), "path": "g" + strconv.Itoa(i),
			"description": strings.Repeat("x", 1000)})
		switch r.Status {
		case 201:
		case 507:
			wantResp(t, r, 507, `{"message":"507 Insufficient Storage - the data volume is full"}`)
			refused++
		default:
			t.Fatalf("POST /groups on a full volume: %d %s", r.Status, r.Body)
		}
	}
	t.Logf("admin writes on the full volume: %d of 20 answered 507", refused)
	noFiles(t, filepath.Join(data, "tmp"))
	noFiles(t, filepath.Join(data, "blobs"))

	// 2. Room for part of a file whose length is not announced: the temp
	// file's write fails with ENOSPC halfway, the client gets it all.
	fill(2 << 20)
	waitFilling(t, d, true)
	diskGet(t, d, reg, "stream/g/big/1/big-1.jar", big)
	if got := diskMetric(t, d, "registryd_cache_fill_disk_full_total", map[string]string{"stage": "write"}); got != 1 {
		t.Fatalf("disk full (write) = %v, want 1", got)
	}
	noFiles(t, filepath.Join(data, "tmp"))
	noFiles(t, filepath.Join(data, "blobs"))

	// 3. Space returns: fills cache again, by themselves.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFilling(t, d, true)
	diskGet(t, d, reg, "g/big/1/big-1.jar", big)
	diskGet(t, d, reg, "g/small/1/small-1.jar", small)
	waitMetrics(t, d, "two cache entries", func(m []byte) bool {
		return metricValue(t, m, "registryd_cache_entries") == 2
	})
	if got := diskMetric(t, d, "registryd_cache_filling", nil); got != 1 {
		t.Fatalf("registryd_cache_filling %v", got)
	}
	noFiles(t, filepath.Join(data, "tmp"))
	d.Do("POST", "/groups", rootToken, map[string]any{"name": "after", "path": "after"}).Expect(t, 201)

	// Three uncached fills, one warning; and one line when it is over.
	logs := d.Logs()
	if n := strings.Count(logs, "the data volume is full: files are served to their clients without caching them"); n != 1 {
		t.Fatalf("%d disk-full warnings, want 1 (once a minute)", n)
	}
	if !strings.Contains(logs, "the data volume has room again: fills are cached") {
		t.Fatal("no line says fills are cached again")
	}
}

// TestDiskFullFileSizeLimit runs the daemon under a file size limit
// (RLIMIT_FSIZE, set by prlimit(1)): a write past it fails with EFBIG (Go
// ignores SIGXFSZ), as one past a quota fails with EDQUOT, while statfs
// shows plenty of room. A file larger than the limit streams uncached
// from the middle of its body; fills stay uncached for the hold
// (store.fullHold, 10 s), then cache again.
func TestDiskFullFileSizeLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("file size limit test needs prlimit(1) (util-linux); not found")
	}
	// registry.db is larger than its data: bbolt grows it (sparse) by 16 MiB
	// at a time.
	d := StartWrapped(t, nil, prlimit, "--fsize="+strconv.Itoa(32<<20), "--")
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	big := pxBody("big", 40<<20+3)
	small := pxBody("small", 100<<10)
	up := diskUpstream(t, map[string][]byte{"g/big/1/big-1.jar": big, "g/small/1/small-1.jar": small})
	f.Upstream(reg, up, nil)

	diskGet(t, d, reg, "g/big/1/big-1.jar", big)
	if got := diskMetric(t, d, "registryd_cache_fill_disk_full_total", map[string]string{"stage": "write"}); got != 1 {
		t.Fatalf("disk full (write) = %v, want 1", got)
	}
	noFiles(t, filepath.Join(d.DataDir, "tmp"))
	noFiles(t, filepath.Join(d.DataDir, "blobs"))
	if filling, reason := readiness(t, d); filling || !strings.HasPrefix(reason, "a write to the data volume failed for want of space") {
		t.Fatalf("readiness: filling %v, reason %q", filling, reason)
	}
	// After the hold, a file within the limit is cached again.
	end := time.Now().Add(30 * time.Second)
	for {
		diskGet(t, d, reg, "g/small/1/small-1.jar", small)
		if metricValue(t, d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body, "registryd_cache_entries") == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("fills did not cache again within 30s")
		}
		time.Sleep(500 * time.Millisecond)
	}
	noFiles(t, filepath.Join(d.DataDir, "tmp"))
}
