package itest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const pxJar = "org/example/lib/1.0/lib-1.0.jar"

// TestProxyDownload walks the download path through the real binary: the
// challenge, a miss, hits, a checksum sidecar, metrics that promtool accepts,
// and download counts that survive a restart.
func TestProxyDownload(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("lib", 300<<10)
	up.set(pxJar, pxFile{body: body, etag: `"v1"`})
	upID := f.Upstream(reg, up.URL, nil)

	anon := d.pxGet(t, reg, pxJar).Expect(t, 401)
	if got := anon.Header.Get("WWW-Authenticate"); got != `Basic realm="registryd"` {
		t.Fatalf("WWW-Authenticate = %q", got)
	}
	miss := d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if !bytes.Equal(miss.Body, body) {
		t.Fatalf("miss body: %d bytes", len(miss.Body))
	}
	sum := sha1.Sum(body)
	// The client has the last byte once the body is whole on disk; the entry
	// is written just after. A sidecar answers from the stored entry, so it
	// returns only once the entry exists (joining the fill if it is still
	// being stored): after it, the next request is a hit for certain.
	sidecar := d.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if string(sidecar.Body) != hex.EncodeToString(sum[:]) {
		t.Fatalf(".sha1 = %q", sidecar.Body)
	}
	hit := d.pxGet(t, reg, pxJar, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:"+rootToken)),
		"Cache-Control", "no-cache").Expect(t, 200)
	if !bytes.Equal(hit.Body, body) || hit.Header.Get("X-Checksum-Sha1") != hex.EncodeToString(sum[:]) {
		t.Fatalf("hit: %d bytes, X-Checksum-Sha1 %q", len(hit.Body), hit.Header.Get("X-Checksum-Sha1"))
	}
	if n := up.calls(pxJar); n != 1 {
		t.Fatalf("upstream GETs = %d, want 1", n)
	}

	metrics := d.Do("GET", "/metrics", "", nil).Expect(t, 200)
	// The sidecar is its own kind: a hit or, when it joined the fill, a join.
	series := func(kind, result string) string {
		return `registryd_cache_lookups_total{kind="` + kind + `",registry="` + itoa(reg) + `",result="` + result +
			`",upstream="` + itoa(upID) + `"}`
	}
	if n := metricValue(t, metrics.Body, series("artifact", "miss")); n != 1 {
		t.Errorf("artifact misses %v, want 1", n)
	}
	if n := metricValue(t, metrics.Body, series("artifact", "hit")); n != 1 {
		t.Errorf("artifact hits %v, want 1", n)
	}
	if !bytes.Contains(metrics.Body, []byte(series("checksum", "hit"))) && !bytes.Contains(metrics.Body, []byte(series("checksum", "join"))) {
		t.Errorf("no checksum lookup series:\n%s", metrics.Body)
	}
	for _, want := range []string{
		`registryd_proxy_requests_total{code="401",route="download"} 1`,
		`registryd_upstream_requests_total{outcome="ok",upstream="` + itoa(upID) + `"} 1`,
		`registryd_cache_blobs 1`,
		`registryd_cache_blob_bytes ` + strconv.Itoa(len(body)),
	} {
		if !strings.Contains(string(metrics.Body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	promtoolCheck(t, metrics.Body)

	// Counts live in memory until the flusher runs; a clean stop flushes them.
	d.Restart()
	var entries []map[string]any
	d.Do("GET", "/virtual_registries/packages/maven/upstreams/"+itoa(upID)+"/cache_entries", rootToken, nil).
		Expect(t, 200).JSON(t, &entries)
	if len(entries) != 1 || entries[0]["downloads_count"] != float64(3) {
		t.Fatalf("cache entries after restart: %v (want downloads_count 3: the miss, the hit, the .sha1)", entries)
	}
	d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if n := up.calls(pxJar); n != 1 {
		t.Fatalf("after a restart the cached file was fetched again (%d GETs)", n)
	}
	fi, err := os.Stat(filepath.Join(d.DataDir, "gateway.secret"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("gateway.secret: %v", err)
	}
}

// promtoolCheck runs `promtool check metrics` on an exposition, when promtool
// is installed (Debian: prometheus).
func promtoolCheck(t *testing.T, exposition []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (apt-get install prometheus): skipping promtool check metrics")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestProxyKillDuringFill kills the daemon while an upstream body is half
// sent: after the restart no temp file and no partial blob are left, and the
// file is fetched again, whole.
func TestProxyKillDuringFill(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("big", 1<<20)
	up.set(pxJar, pxFile{body: body, hold: true})
	upID := f.Upstream(reg, up.URL, nil)

	req, _ := http.NewRequest(http.MethodGet, d.pxURL(reg, pxJar), nil)
	req.Header.Set("PRIVATE-TOKEN", rootToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-up.midBody
	// The client streams from the temp file, so its first byte proves the
	// fill is writing one.
	if _, err := io.ReadFull(res.Body, make([]byte, 1)); err != nil {
		t.Fatalf("first byte: %v", err)
	}
	tmp := filepath.Join(d.DataDir, "tmp")
	if ents, _ := os.ReadDir(tmp); len(ents) == 0 {
		t.Fatal("no temp file during the fill")
	}
	d.Kill()
	if n, err := pxDrain(res.Body); err == nil {
		t.Fatalf("the body of a killed fill ended cleanly after %d more bytes", n)
	}
	res.Body.Close()

	up.set(pxJar, pxFile{body: body})
	d.Restart()
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("DATA_DIR/tmp holds %d files after the restart", len(ents))
	}
	var entries []map[string]any
	d.Do("GET", "/virtual_registries/packages/maven/upstreams/"+itoa(upID)+"/cache_entries", rootToken, nil).
		Expect(t, 200).JSON(t, &entries)
	if len(entries) != 0 {
		t.Fatalf("a killed fill left entries: %v", entries)
	}
	got := d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if !bytes.Equal(got.Body, body) {
		t.Fatalf("after the restart: %d bytes, want %d", len(got.Body), len(body))
	}
	// The sidecar returns once the refetched file is stored.
	d.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if n := up.calls(pxJar); n != 2 {
		t.Fatalf("upstream GETs = %d, want 2", n)
	}
	// Every blob file on disk is the whole file.
	sum := sha256.Sum256(body)
	hexsum := hex.EncodeToString(sum[:])
	blobs := 0
	filepath.WalkDir(filepath.Join(d.DataDir, "blobs"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			blobs++
			if e.Name() != hexsum {
				t.Errorf("unexpected blob %s", p)
			}
		}
		return nil
	})
	if blobs != 1 {
		t.Fatalf("%d blob files, want 1", blobs)
	}
}

// metricValue reads one sample of a Prometheus text exposition.
func metricValue(t *testing.T, exposition []byte, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(exposition), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics lacks %s", series)
	return 0
}

// gatewayJWT signs an HS256 JWT with iat = now.
func gatewayJWT(secret []byte) string {
	h, _ := json.Marshal(map[string]string{"alg": "HS256", "typ": "JWT"})
	p, _ := json.Marshal(map[string]any{"iat": time.Now().Unix(), "iss": "gateway"})
	s := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(s))
	return registerSecret("gateway JWT", s+"."+base64.RawURLEncoding.EncodeToString(mac.Sum(nil)))
}

// TestProxyGatewayUpload uploads a file as a gateway would, with the secret
// from the configuration, and downloads it back as a cache hit.
func TestProxyGatewayUpload(t *testing.T) {
	secret := "an-upload-gateway-secret-of-40-characters"
	d := Start(t, map[string]string{"REGISTRYD_GATEWAY_SECRET": secret})
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	upID := f.Upstream(reg, up.URL, nil)

	upload := func(jwt string) *Resp {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		fw, _ := mw.CreateFormFile("file", "lib-1.0.jar")
		fw.Write([]byte("uploaded by the gateway"))
		mw.Close()
		req, _ := http.NewRequest(http.MethodPost, d.pxURL(reg, pxJar+"/upload"), &b)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("PRIVATE-TOKEN", rootToken)
		req.Header.Set("Upstream-GID", "gid://registryd/Upstream/"+itoa(upID))
		req.Header.Set("Etag", `"gw-1"`)
		if jwt != "" {
			req.Header.Set("Svc-Gateway-Api-Request", jwt)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return &Resp{Status: res.StatusCode, Header: res.Header, Body: raw}
	}
	upload("").Expect(t, 403)
	upload(gatewayJWT([]byte("some-other-secret-some-other-secret"))).Expect(t, 403)
	if r := upload(gatewayJWT([]byte(secret))).Expect(t, 200); len(r.Body) != 0 {
		t.Fatalf("upload answered %q", r.Body)
	}
	d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if got := d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Body; string(got) != "uploaded by the gateway" {
		t.Fatalf("download after upload: %q", got)
	}
	if n := up.calls(pxJar); n != 0 {
		t.Fatalf("the upstream was asked %d times for an uploaded file", n)
	}
}
