package proxy

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"

	"registryd/auth"
	"registryd/store"
)

// user creates a user with a token of the given scopes and returns the token.
func (e *env) user(name string, scopes ...string) (int64, string) {
	e.t.Helper()
	u, err := e.st.CreateUser(store.NewUser{Username: name, Name: name, Email: name + "@example.com"})
	if err != nil {
		e.t.Fatal(err)
	}
	tok := "rdpat-" + name + "-0123456789abcdef"
	if _, err := e.st.CreateToken(store.NewToken{UserID: u.ID, Name: "t", Scopes: scopes, Plain: tok}); err != nil {
		e.t.Fatal(err)
	}
	return u.ID, tok
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestDownloadAuth(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("jar")})
	e.upstream(up.URL, nil, nil)

	memberID, member := e.user("member", store.ScopeReadVirtualRegistry)
	if _, err := e.st.AddGroupMember(e.group.ID, memberID, store.Guest, nil); err != nil {
		t.Fatal(err)
	}
	apiID, apiTok := e.user("apiuser", store.ScopeAPI)
	if _, err := e.st.AddGroupMember(e.group.ID, apiID, store.Reporter, nil); err != nil {
		t.Fatal(err)
	}
	readAPIID, readAPI := e.user("readapi", store.ScopeReadAPI)
	if _, err := e.st.AddGroupMember(e.group.ID, readAPIID, store.Guest, nil); err != nil {
		t.Fatal(err)
	}
	wrongScopeID, wrongScope := e.user("wrongscope", store.ScopeReadUser)
	if _, err := e.st.AddGroupMember(e.group.ID, wrongScopeID, store.Owner, nil); err != nil {
		t.Fatal(err)
	}
	_, stranger := e.user("stranger", store.ScopeAPI)
	deployTok := "rddt-acme-deploy-token-0123456789"
	dt, err := e.st.CreateDeployToken(store.NewDeployToken{GroupID: e.group.ID, Name: "ci", Username: "ci-bot",
		Scopes: []string{store.ScopeReadVirtualRegistry}, Plain: deployTok})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.st.CreateGroup(store.NewGroup{Name: "other", Path: "other", Visibility: store.Private})
	if err != nil {
		t.Fatal(err)
	}
	otherDeploy := "rddt-other-deploy-token-0123456789"
	if _, err := e.st.CreateDeployToken(store.NewDeployToken{GroupID: other.ID, Name: "ci", Username: "other-bot",
		Scopes: []string{store.ScopeReadVirtualRegistry}, Plain: otherDeploy}); err != nil {
		t.Fatal(err)
	}
	pub, err := e.st.CreateGroup(store.NewGroup{Name: "pub", Path: "pub", Visibility: store.Public})
	if err != nil {
		t.Fatal(err)
	}
	pubReg, err := e.st.CreateRegistry(pub.ID, "pub", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CreateUpstream(pubReg.ID, store.NewUpstream{URL: up.URL, Name: "pub"}); err != nil {
		t.Fatal(err)
	}
	empty, err := e.st.CreateRegistry(e.group.ID, "empty", "")
	if err != nil {
		t.Fatal(err)
	}

	reg := "/" + strconv.FormatInt(e.registry, 10) + "/"
	cases := []struct {
		name    string
		path    string
		hdr     []string
		status  int
		key     string
		message string
	}{
		{name: "anonymous", path: reg + jarPath, status: 401, key: "message", message: "401 Unauthorized"},
		{name: "unknown token", path: reg + jarPath, hdr: []string{"Private-Token", "rdpat-nope"}, status: 401},
		{name: "PRIVATE-TOKEN", path: reg + jarPath, hdr: []string{"Private-Token", member}, status: 200},
		{name: "private_token query", path: reg + jarPath + "?private_token=" + member, status: 200},
		{name: "Bearer", path: reg + jarPath, hdr: []string{"Authorization", "Bearer " + member}, status: 200},
		{name: "Basic username and PAT", path: reg + jarPath, hdr: []string{"Authorization", basic("member", member)}, status: 200},
		{name: "Basic with another username", path: reg + jarPath, hdr: []string{"Authorization", basic("root", member)}, status: 401},
		{name: "Basic without a password", path: reg + jarPath, hdr: []string{"Authorization", basic("member", "")}, status: 401},
		{name: "Deploy-Token", path: reg + jarPath, hdr: []string{"Deploy-Token", deployTok}, status: 200},
		{name: "Basic deploy username and token", path: reg + jarPath, hdr: []string{"Authorization", basic(dt.Username, deployTok)}, status: 200},
		{name: "Basic deploy token with a wrong username", path: reg + jarPath, hdr: []string{"Authorization", basic("someone", deployTok)}, status: 401},
		{name: "scope api", path: reg + jarPath, hdr: []string{"Private-Token", apiTok}, status: 200},
		{name: "scope read_api", path: reg + jarPath, hdr: []string{"Private-Token", readAPI}, status: 200},
		{name: "scope read_user only", path: reg + jarPath, hdr: []string{"Private-Token", wrongScope}, status: 403, key: "error", message: "insufficient_scope"},
		{name: "non-member of a private group", path: reg + jarPath, hdr: []string{"Private-Token", stranger}, status: 404, key: "message", message: "404 Not found"},
		{name: "deploy token of another group", path: reg + jarPath, hdr: []string{"Deploy-Token", otherDeploy}, status: 404},
		{name: "non-member of a public group", path: "/" + strconv.FormatInt(pubReg.ID, 10) + "/" + jarPath, hdr: []string{"Private-Token", stranger}, status: 403, key: "message", message: "403 Forbidden"},
		{name: "unknown registry", path: "/9999/" + jarPath, hdr: []string{"Private-Token", rootToken}, status: 404, key: "message", message: "404 Not found"},
		{name: "registry without upstreams", path: "/" + strconv.FormatInt(empty.ID, 10) + "/" + jarPath, hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - No upstreams set"},
		{name: "browser", path: reg + jarPath, hdr: []string{"Private-Token", rootToken, "User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"}, status: 400, key: "message", message: "400 Bad request - This endpoint is not meant to be accessed by a web browser."},
		{name: "Maven's user agent", path: reg + jarPath, hdr: []string{"Private-Token", rootToken, "User-Agent", "Apache-Maven/3.8.7 (Java 17.0.14; Linux 6.1.0)"}, status: 200},
		{name: "empty path", path: reg, hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - Path not present"},
		{name: "no path at all", path: "/" + strconv.FormatInt(e.registry, 10), hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - Path not present"},
		{name: "dot-dot", path: reg + "org/../../etc/passwd", hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - path contains '..'"},
		{name: "encoded dot-dot", path: reg + "org/%2e%2e/x.jar", hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - path contains '..'"},
		{name: "backslash", path: reg + "org/a%5Cb.jar", hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - path contains a backslash"},
		{name: "empty segment", path: reg + "org//x.jar", hdr: []string{"Private-Token", rootToken}, status: 400, key: "message", message: "400 Bad request - path contains an empty segment"},
		{name: "bad path before authentication", path: reg + "org/%00/x.jar", status: 400, key: "message", message: "400 Bad request - path contains NUL"},
		{name: "registry id not a number", path: "/abc/" + jarPath, hdr: []string{"Private-Token", rootToken}, status: 400, key: "error", message: "id is invalid"},
		{name: "another route", path: "x/1/" + jarPath, hdr: []string{"Private-Token", rootToken}, status: 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(http.MethodGet, c.path, nil, c.hdr...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if c.message != "" {
				r.expectMessage(t, c.key, c.message)
			}
			if got := r.header.Get("Www-Authenticate"); (c.status == 401) != (got == `Basic realm="registryd"`) {
				t.Fatalf("WWW-Authenticate = %q on a %d", got, c.status)
			}
			if c.status >= 400 && r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("error Content-Type = %q", r.header.Get("Content-Type"))
			}
		})
	}
	if up.total() != 1 {
		t.Fatalf("upstream GETs = %d: only the first successful download may reach it", up.total())
	}
	// HEAD of a refused request: same status, no body.
	if r := e.do(http.MethodHead, reg+jarPath, nil); r.status != 401 || len(r.body) != 0 {
		t.Fatalf("anonymous HEAD: %d %q", r.status, r.body)
	}
	if r := e.do(http.MethodPut, reg+jarPath, nil, "Private-Token", rootToken); r.status != 405 || r.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("PUT: %d, Allow %q", r.status, r.header.Get("Allow"))
	}
	e.lint()
}

func TestFeatureGates(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  func(*envOptions)
	}{
		{"feature flag off", func(o *envOptions) { o.auth.DisableVirtualRegistry = true }},
		{"free plan", func(o *envOptions) { o.auth.Plan = auth.PlanFree }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.opt)
			up := newFakeUpstream(t)
			e.upstream(up.URL, nil, nil)
			// Before authentication: anonymous and root alike get 404.
			for _, hdr := range [][]string{nil, {"Private-Token", rootToken}} {
				r := e.do(http.MethodGet, "/"+strconv.FormatInt(e.registry, 10)+"/"+jarPath, nil, hdr...)
				r.expect(t, 404)
				r.expectMessage(t, "message", "404 Not Found")
			}
			if up.total() != 0 {
				t.Fatal("a gated request reached the upstream")
			}
		})
	}
}
