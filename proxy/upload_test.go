package proxy

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"registryd/store"
)

// multipartBody builds a gateway upload body: the file part (unless
// file is nil) and the other fields.
func multipartBody(t *testing.T, file []byte, fields ...string) (*bytes.Buffer, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := mw.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if file != nil {
		fw, err := mw.CreateFormFile("file", "upload.jar")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(file)
	}
	mw.Close()
	return &b, mw.FormDataContentType()
}

func TestGatewayUpload(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Cache.MaxFileBytes = 64 << 10 })
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	other, err := e.st.CreateRegistry(e.group.ID, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := e.st.CreateUpstream(other.ID, store.NewUpstream{URL: up.URL + "/other", Name: "foreign"})
	if err != nil {
		t.Fatal(err)
	}
	_, stranger := e.user("stranger", store.ScopeAPI)

	now := e.clock.Now()
	good := gatewayToken(e.secret, "HS256", map[string]any{"iat": now.Unix(), "iss": "gateway"})
	gid := "gid://registryd/Upstream/" + strconv.FormatInt(uid, 10)
	uploadPath := "/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath + "/upload"
	content := []byte("uploaded jar bytes")

	post := func(path string, body []byte, hdr ...string) resp {
		t.Helper()
		b, ctype := multipartBody(t, body, "path", jarPath)
		return e.do(http.MethodPost, path, b, append([]string{"Content-Type", ctype}, hdr...)...)
	}
	auth := []string{"Private-Token", rootToken}

	cases := []struct {
		name    string
		path    string
		body    []byte
		hdr     []string
		status  int
		message string
	}{
		{name: "no gateway token", hdr: append([]string{"Upstream-GID", gid}, auth...), status: 403,
			message: "403 Forbidden - Request should be executed via the gateway"},
		{name: "token signed with another secret", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request",
			gatewayToken([]byte("another-secret-another-secret-00"), "HS256", map[string]any{"iat": now.Unix()})}, auth...), status: 403},
		{name: "token too old", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request",
			gatewayToken(e.secret, "HS256", map[string]any{"iat": now.Add(-91 * time.Second).Unix()})}, auth...), status: 403},
		{name: "token without iat", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request",
			gatewayToken(e.secret, "HS256", map[string]any{"iss": "gateway"})}, auth...), status: 403},
		{name: "alg none", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request",
			strings.Join(strings.Split(gatewayToken(e.secret, "none", map[string]any{"iat": now.Unix()}), ".")[:2], ".") + "."}, auth...), status: 403},
		{name: "gateway token but no caller token", hdr: []string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good}, status: 401},
		{name: "caller who cannot see the registry", hdr: []string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good, "Private-Token", stranger}, status: 404},
		{name: "unknown upstream", hdr: append([]string{"Upstream-GID", "gid://registryd/Upstream/999", "Svc-Gateway-Api-Request", good}, auth...),
			status: 404, message: "404 Upstream Not Found"},
		{name: "upstream of another registry", hdr: append([]string{"Upstream-GID", "gid://registryd/Upstream/" + strconv.FormatInt(foreign.ID, 10), "Svc-Gateway-Api-Request", good}, auth...),
			status: 404, message: "404 Upstream Not Found"},
		{name: "malformed gid", hdr: append([]string{"Upstream-GID", "Upstream/" + strconv.FormatInt(uid, 10), "Svc-Gateway-Api-Request", good}, auth...),
			status: 404, message: "404 Upstream Not Found"},
		{name: "no file part", body: nil, hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good}, auth...),
			status: 400, message: "400 Bad request - file is missing"},
		{name: "file too large", body: make([]byte, 65<<10), hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good}, auth...),
			status: 413},
		{name: "bad path", path: "/" + strconv.FormatInt(e.registry, 10) + "/a/../b.jar/upload", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good}, auth...),
			status: 400, message: "400 Bad request - path contains '..'"},
		{name: "no path", path: "/" + strconv.FormatInt(e.registry, 10) + "/upload", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good}, auth...),
			status: 400, message: "400 Bad request - Path not present"},
		{name: "checksum path", path: "/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath + ".sha1/upload", hdr: append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good}, auth...),
			status: 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = uploadPath
			}
			body := c.body
			if body == nil && c.name != "no file part" {
				body = content
			}
			r := post(path, body, c.hdr...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if c.message != "" {
				r.expectMessage(t, "message", c.message)
			}
			if _, ok := e.entry(uid, "/"+jarPath); ok {
				t.Fatal("a refused upload created an entry")
			}
		})
	}
	e.noBrokenState()

	// Accepted: the spec's headers...
	r := post(uploadPath, content, append([]string{"Upstream-GID", gid, "Svc-Gateway-Api-Request", good,
		"Etag", `"up-1"`, "Svc-Gateway-Send-Dependency-Content-Type", "application/x-java-archive"}, auth...)...)
	r.expect(t, 200)
	if len(r.body) != 0 {
		t.Fatalf("upload answered a body: %q", r.body)
	}
	ce, ok := e.entry(uid, "/"+jarPath)
	m5, s1, s256, _ := digests(content)
	if !ok || ce.ETag != `"up-1"` || ce.ContentType != "application/x-java-archive" || ce.Size != int64(len(content)) ||
		ce.SHA1 != s1 || ce.MD5 != m5 || ce.SHA256 != s256 || ce.DownloadsCount != 1 || !ce.CheckedAt.Equal(now) {
		t.Fatalf("entry after upload: %+v", ce)
	}
	// ...and it is served as a hit without any upstream request.
	e.get(jarPath).expect(t, 200).expectBody(t, string(content))
	if up.total() != 0 {
		t.Fatal("the upstream was asked for an uploaded file")
	}

	// Replaced atomically through GitLab's header names and gid form.
	replacement := []byte("a newer jar")
	gitlabGID := "gid://gitlab/VirtualRegistries::Packages::Maven::Upstream/" + strconv.FormatInt(uid, 10)
	post(uploadPath, replacement, append([]string{"X-Gitlab-Virtual-Registry-Upstream-Global-Id", gitlabGID,
		"Svc-Gateway-Api-Request", good, "Workhorse-Proxy-Content-Type", "application/java-archive"}, auth...)...).expect(t, 200)
	ce, _ = e.entry(uid, "/"+jarPath)
	if ce.Size != int64(len(replacement)) || ce.ETag != "" || ce.ContentType != "application/java-archive" || ce.DownloadsCount < 2 {
		t.Fatalf("entry after the replacing upload: %+v", ce)
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(replacement))
	e.noBrokenState()
}

func TestVerifyGatewayToken(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		token string
		ok    bool
	}{
		{"fresh", gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix()}), true},
		{"89s old", gatewayToken(secret, "HS256", map[string]any{"iat": now.Add(-89 * time.Second).Unix()}), true},
		{"fractional iat", gatewayToken(secret, "HS256", map[string]any{"iat": float64(now.Unix()) + 0.5}), true},
		{"91s old", gatewayToken(secret, "HS256", map[string]any{"iat": now.Add(-91 * time.Second).Unix()}), false},
		{"91s in the future", gatewayToken(secret, "HS256", map[string]any{"iat": now.Add(91 * time.Second).Unix()}), false},
		{"expired", gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix(), "exp": now.Add(-time.Second).Unix()}), false},
		{"not yet valid", gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix(), "nbf": now.Add(time.Hour).Unix()}), false},
		{"iat a string", gatewayToken(secret, "HS256", map[string]any{"iat": "now"}), false},
		{"HS512 header", gatewayToken(secret, "HS512", map[string]any{"iat": now.Unix()}), false},
		{"wrong secret", gatewayToken([]byte("x"), "HS256", map[string]any{"iat": now.Unix()}), false},
		{"empty", "", false},
		{"two parts", "a.b", false},
		{"four parts", gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix()}) + ".x", false},
		{"garbage", "!!!.???.***", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := verifyGatewayToken([]byte(c.token), secret, now)
			if (err == nil) != c.ok {
				t.Fatalf("verify = %v, want ok %v", err, c.ok)
			}
		})
	}
	// A signature over a tampered payload fails.
	parts := strings.Split(gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix()}), ".")
	other := strings.Split(gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix(), "sub": "x"}), ".")
	if verifyGatewayToken([]byte(parts[0]+"."+other[1]+"."+parts[2]), secret, now) == nil {
		t.Fatal("a tampered payload verified")
	}
}

func FuzzVerifyGatewayToken(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	f.Add(gatewayToken(secret, "HS256", map[string]any{"iat": now.Unix()}))
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		_ = verifyGatewayToken([]byte(token), secret, now)
	})
}
