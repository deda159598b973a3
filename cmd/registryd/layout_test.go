package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLayout keeps the house rules of DESIGN.md ("Rules of the house") true
// as the code changes: which package may import what.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "registryd/...").Output()
	if err != nil {
		t.Skipf("go list: %v", err) // no go tool beside the test binary
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[strings.TrimPrefix(f[0], "registryd/")] = f[1:]
	}
	rules := []struct {
		pkg    string
		banned []string
		why    string
	}{
		{"admin", []string{"registryd/proxy", "github.com/valyala/fasthttp", "go.etcd.io/bbolt"}, "admin and proxy are siblings; only store touches bbolt"},
		{"proxy", []string{"registryd/admin", "go.etcd.io/bbolt"}, "admin and proxy are siblings; only store touches bbolt"},
		{"store", []string{"go.etcd.io/bbolt", "net/http", "github.com/valyala/fasthttp", "registryd/auth", "registryd/admin", "registryd/proxy", "registryd/upstream", "registryd/maven", "registryd/sbom", "registryd/eventimport", "registryd/osv", "registryd/advisories", "registryd/store/kv/boltkv", "registryd/store/kv/pgkv"}, "store is the lowest floor above config, and opens no engine: cmd does"},
		{"store/blob", []string{"registryd/store", "registryd/store/kv", "registryd/store/kv/boltkv", "registryd/store/kv/pgkv", "go.etcd.io/bbolt", "github.com/jackc/pgx/v5", "net/http", "github.com/valyala/fasthttp"}, "the bytes know no index entries: store binds entries to blobs"},
		{"store/kv", []string{"go.etcd.io/bbolt", "github.com/jackc/pgx/v5"}, "the engine contract names no engine"},
		{"store/kv/pgkv", []string{"go.etcd.io/bbolt", "registryd/store"}, "an engine knows the contract, not the store above it"},
		{"store/kv/boltkv", []string{"github.com/jackc/pgx/v5", "registryd/store"}, "an engine knows the contract, not the store above it"},
		{"clustercopy", []string{"go.etcd.io/bbolt", "github.com/jackc/pgx/v5", "net/http", "github.com/valyala/fasthttp"}, "clustercopy copies through the kv contract, whatever the engines"},
		{"maven", []string{"net/http", "github.com/valyala/fasthttp", "go.etcd.io/bbolt", "registryd/store", "os"}, "pure Maven knowledge, no I/O"},
		{"sbom", []string{"net/http", "github.com/valyala/fasthttp", "go.etcd.io/bbolt"}, "CycloneDX and SPDX reading, no HTTP"},
		{"osv", []string{"net/http", "github.com/valyala/fasthttp", "go.etcd.io/bbolt", "os"}, "OSV decoding and matching, no I/O of its own"},
		{"advisories", []string{"github.com/valyala/fasthttp", "go.etcd.io/bbolt", "registryd/admin", "registryd/proxy"}, "imports run beside the listeners"},
		{"eventimport", []string{"net/http", "github.com/valyala/fasthttp", "go.etcd.io/bbolt"}, "event import, no HTTP"},
		{"upstream", []string{"github.com/valyala/fasthttp", "go.etcd.io/bbolt", "registryd/admin", "registryd/proxy"}, "the upstream client serves both listeners"},
		{"auth", []string{"net/http", "github.com/valyala/fasthttp", "go.etcd.io/bbolt"}, "auth decides; the listeners speak HTTP"},
		{"internal/history", []string{"net/http", "github.com/valyala/fasthttp", "go.etcd.io/bbolt", "registryd/proxy", "registryd/proxy/cache", "registryd/admin"}, "the traffic history reads the proxy's counters from the metrics registry, not from package proxy"},
	}
	for _, r := range rules {
		imps, ok := imports[r.pkg]
		if !ok {
			t.Errorf("package %s not found", r.pkg)
			continue
		}
		for _, imp := range imps {
			for _, b := range r.banned {
				if imp == b {
					t.Errorf("%s imports %s: %s", r.pkg, imp, r.why)
				}
			}
		}
	}
	// Only cmd opens the index engines (the same way for bbolt and
	// PostgreSQL); internal/boltstore opens a single node's bbolt index for
	// the tests and the bench, and nothing else imports it. Tests may
	// import the engines (go list's Imports leaves test files out).
	mayOpenEngines := map[string]bool{"cmd/registryd": true, "internal/boltstore": true}
	for pkg, imps := range imports {
		for _, engine := range []string{"registryd/store/kv/boltkv", "registryd/store/kv/pgkv"} {
			if !mayOpenEngines[pkg] && slices.Contains(imps, engine) {
				t.Errorf("%s imports %s: only cmd opens the index engines", pkg, engine)
			}
		}
		if pkg != "bench" && slices.Contains(imps, "registryd/internal/boltstore") {
			t.Errorf("%s imports registryd/internal/boltstore: it is for tests and the bench", pkg)
		}
	}
	// Only the proxy listener speaks fasthttp (admin uses net/http).
	for pkg, imps := range imports {
		if pkg != "proxy" && slices.Contains(imps, "github.com/valyala/fasthttp") {
			t.Errorf("%s imports github.com/valyala/fasthttp: only proxy (the listener) does", pkg)
		}
	}
	// Each component takes Options of its own; cmd maps the configuration
	// onto them, and bench writes configurations for the daemons it starts.
	mayImportConfig := map[string]bool{"cmd/registryd": true, "bench": true}
	for pkg, imps := range imports {
		if !mayImportConfig[pkg] && slices.Contains(imps, "registryd/config") {
			t.Errorf("%s imports registryd/config: only cmd and bench do; take Options of your own", pkg)
		}
	}
}

// listenerFiles are the files of package proxy that make the fasthttp
// listener: parse, authenticate, render. Every other file of the package
// is the cache engine, which is to move to proxy/cache (issue 21).
var listenerFiles = []string{
	"accesslog.go", "download.go", "errors.go", "gateway.go", "options.go", "probes.go", "problem.go",
	"remote.go", "serve.go", "servetls.go", "server.go", "upload.go",
}

// TestEngineSeam keeps the seam along which the engine leaves package
// proxy: the engine's files build as a package of their own (an overlay
// copies them, without the listener's files, into proxy/enginecheck), so
// they use nothing of the listener's, and they import neither fasthttp nor
// config.
func TestEngineSeam(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "registryd/proxy").Output()
	if err != nil {
		t.Skipf("go list: %v", err) // no go tool beside the test binary
	}
	dir := strings.TrimSpace(string(out))
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	check := filepath.Join(dir, "enginecheck")
	replace := map[string]string{}
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasSuffix(base, "_test.go") || slices.Contains(listenerFiles, base) {
			continue
		}
		replace[filepath.Join(check, base)] = f
	}
	raw, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(overlay, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-overlay", overlay, "-o", os.DevNull, "registryd/proxy/enginecheck")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the engine's files of package proxy do not build without the listener's (%v):\n%s", err, out)
	}
	out, err = exec.Command("go", "list", "-overlay", overlay, "-f", "{{join .Imports \" \"}}",
		"registryd/proxy/enginecheck").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if imp == "github.com/valyala/fasthttp" || imp == "registryd/config" || imp == "registryd/proxy" {
			t.Errorf("the engine's files import %s: the engine speaks no HTTP and takes Options of its own", imp)
		}
	}
}
