package itest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// accessLines polls read (a daemon's output) until it holds n access log
// lines (the log is flushed at least every 200ms) and returns them.
func accessLines(t *testing.T, n int, read func() string) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var lines []map[string]any
		for _, l := range strings.Split(read(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "access" {
				lines = append(lines, m)
			}
		}
		if len(lines) >= n || time.Now().After(deadline) {
			if len(lines) != n {
				t.Fatalf("%d access lines, want %d:\n%s", len(lines), n, read())
			}
			return lines
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProxyAccessLog: on by default, one JSON line per proxy request in
// the daemon's log, without the query (which can carry the token);
// proxy.access_log_path moves it to a file; proxy.access_log=false stops it.
func TestProxyAccessLog(t *testing.T) {
	up := newPxUpstream(t)
	up.set(pxJar, pxFile{body: pxBody("jar", 2048)})

	t.Run("default: in the daemon's log", func(t *testing.T) {
		d := Start(t, nil)
		f := d.Fix(t)
		reg := f.Registry(f.Group("acme", 0, "private"), "main")
		f.Upstream(reg, up.URL, nil)
		d.pxGet(t, reg, pxJar+"?private_token="+rootToken).Expect(t, 200)
		d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", "rdpat-not-a-token-0123456789", "User-Agent", "Apache-Maven/3.9.6").Expect(t, 401)
		d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		lines := accessLines(t, 3, d.Logs)
		for i, want := range []float64{200, 401, 200} {
			m := lines[i]
			if m["status"] != want || m["method"] != "GET" || m["client"] != "127.0.0.1" || m["level"] != "INFO" ||
				m["path"] != "/api/v4/virtual_registries/packages/maven/"+itoa(reg)+"/"+pxJar {
				t.Errorf("line %d: %v", i, m)
			}
			if _, ok := m["duration"].(float64); !ok {
				t.Errorf("line %d: duration %v", i, m["duration"])
			}
		}
		if lines[0]["bytes"] != 2048.0 || lines[1]["error"] != "401 Unauthorized" || lines[1]["ua"] != "Apache-Maven/3.9.6" {
			t.Errorf("lines: %v", lines)
		}
		if strings.Contains(d.Logs(), "private_token") {
			t.Error("the query reached the log")
		}
	})

	t.Run("to a file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "access.log")
		d := Start(t, map[string]string{"REGISTRYD_PROXY_ACCESS_LOG_PATH": path})
		f := d.Fix(t)
		reg := f.Registry(f.Group("acme", 0, "private"), "main")
		f.Upstream(reg, up.URL, nil)
		d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		d.pxGet(t, reg, "org/example/none/1.0/none-1.0.jar", "PRIVATE-TOKEN", rootToken).Expect(t, 404)
		read := func() string { raw, _ := os.ReadFile(path); return string(raw) }
		lines := accessLines(t, 2, read)
		if lines[1]["status"] != 404.0 || lines[1]["error"] == nil {
			t.Errorf("the 404: %v", lines[1])
		}
		d.Stop()
		// Stopping flushed it, and the daemon's own log has no access line.
		accessLines(t, 2, read)
		accessLines(t, 0, d.Logs)
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("access log file: %v %v", fi.Mode(), err)
		}
	})

	t.Run("off", func(t *testing.T) {
		d := Start(t, map[string]string{"REGISTRYD_PROXY_ACCESS_LOG": "false"})
		f := d.Fix(t)
		reg := f.Registry(f.Group("acme", 0, "private"), "main")
		f.Upstream(reg, up.URL, nil)
		d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		d.Stop()
		accessLines(t, 0, d.Logs)
	})
}

// TestUpstreamURLCredentialsNeverLogged: a password written into an
// upstream's URL (userinfo; a query is refused) works for fetching and,
// like every credential of the suite, never reaches a log line (TestMain's
// check), through a miss, a hit, a failing upstream and its 502.
func TestUpstreamURLCredentialsNeverLogged(t *testing.T) {
	up := newPxUpstream(t)
	up.set(pxJar, pxFile{body: pxBody("jar", 512)})
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	pass := registerSecret("upstream URL password", "url-embedded-pw-7a3c9e")
	withCreds := strings.Replace(up.URL, "http://", "http://bot:"+pass+"@", 1)
	created := d.Do("POST", vr("/registries/%d/upstreams", reg), rootToken, map[string]any{"url": withCreds}).Expect(t, 201)
	// The credentials leave the url: the password is sealed like any other
	// and never returned.
	if bytes.Contains(created.Body, []byte(pass)) || !bytes.Contains(created.Body, []byte(`"username":"bot"`)) {
		t.Fatalf("created upstream: %s", created.Body)
	}
	d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	// A second registry whose only upstream refuses connections: a 502
	// whose reasons are logged.
	dead := strings.Replace(withCreds, strings.TrimPrefix(up.srv.URL, "http://"), "127.0.0.1:1", 1)
	reg2 := f.Registry(f.Group("beta", 0, "private"), "dead")
	d.Do("POST", vr("/registries/%d/upstreams", reg2), rootToken, map[string]any{"url": dead}).Expect(t, 201)
	if r := d.pxGet(t, reg2, pxJar, "PRIVATE-TOKEN", rootToken); r.Status != 502 && r.Status != 504 {
		t.Fatalf("a dead upstream: %d %s", r.Status, r.Body)
	}
	lines := accessLines(t, 3, d.Logs)
	if e, _ := lines[2]["error"].(string); !strings.Contains(e, "upstream ") {
		t.Errorf("the 502's line has no upstream reason: %v", lines[2])
	}
}
