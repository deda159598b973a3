package itest

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// requireInCI skips a test whose client or fixture is missing (have
// false), with msg, except in CI (CI=true), where .ci/run installs it and a
// skip would hide its absence.
func requireInCI(t *testing.T, have bool, msg string) {
	t.Helper()
	if have {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (.ci/run installs it: CI must not skip this test)")
	}
	t.Skip(msg)
}

// trustStorePassword protects the test's Java trust store, which holds
// only the test CA's certificate: no secret.
const trustStorePassword = "registryd-itest"

// javaTrustStore writes a PKCS12 trust store holding the fixture's CA
// alone, as docs/operations.md ("Clients with a private CA") tells
// operators to, and returns the JVM options that make a client use it.
func (f *tlsFixture) javaTrustStore(t *testing.T) string {
	t.Helper()
	store := filepath.Join(f.dir, "truststore.p12")
	out, err := exec.Command("keytool", "-importcert", "-noprompt", "-alias", "registryd-itest-ca", "-file", f.caFile,
		"-keystore", store, "-storetype", "PKCS12", "-storepass", trustStorePassword).CombinedOutput()
	if err != nil {
		t.Fatalf("keytool: %v\n%s", err, out)
	}
	return "-Djavax.net.ssl.trustStore=" + store + " -Djavax.net.ssl.trustStorePassword=" + trustStorePassword +
		" -Djavax.net.ssl.trustStoreType=PKCS12"
}

// TestTLSRealClients: real Maven and Leiningen resolve through registryd
// over TLS, trusting the test CA through a Java trust store given in
// MAVEN_OPTS and LEIN_JVM_OPTS. The upstream is Debian's Maven repository
// (realclients_test.go's fixture; Leiningen's Clojure comes from Debian's
// libclojure-java). Leiningen refuses the plain http:// URL of a
// repository before it connects. Nothing leaves loopback.
func TestTLSRealClients(t *testing.T) {
	if testing.Short() {
		t.Skip("real-client builds take minutes; skipped with -short")
	}
	requireTools(t, "keytool")
	fx := sharedMavenFixture(t)
	f := newTLSFixture(t)
	cert, key, _ := f.write("server", 2)
	javaOpts := f.javaTrustStore(t)
	d := startTLS(t, f, f.env(cert, key, cert, key))
	repo := serveCentralRepo(t, fx.Root)
	fix := d.Fix(t)
	group := fix.Group("tls-builds", 0, "private")
	registry := fix.Registry(group, "maven")
	upstream := fix.Upstream(registry, repo.URL, nil)
	uid, token := fix.User("tlsbuilder", false, "read_virtual_registry")
	fix.Member(group, uid, 10)
	registerSecret("tlsbuilder's Basic credentials", base64.StdEncoding.EncodeToString([]byte("tlsbuilder:"+token)))
	url := d.Proxy + "/api/v4/virtual_registries/packages/maven/" + itoa(registry)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registryd's log (last 40 lines):\n%s", lastLines(d.Logs(), 40))
		}
	})

	t.Run("maven", func(t *testing.T) {
		requireTools(t, "mvn")
		local := mavenBuild(t, fx, mavenRepoAccess{URL: url, Username: "tlsbuilder", Password: token, JavaOpts: javaOpts})
		assertSameBytes(t, fx, local)
	})

	t.Run("leiningen", func(t *testing.T) {
		_, err := exec.LookPath("lein")
		requireInCI(t, err == nil, "no lein command; on Debian: apt-get install leiningen (listed in .ci/packages)")
		clojure := releaseVersion(filepath.Join(fx.Root, "org/clojure/clojure"))
		requireInCI(t, clojure != "", "no Clojure in "+debianMavenRepo+"; on Debian: apt-get install libclojure-java (leiningen's dependency)")
		lein := func(t *testing.T, repoURL string) (string, string, error) {
			local := filepath.Join(t.TempDir(), "m2")
			project := writeProject(t, map[string]string{"Clojure": clojure, "URL": repoURL, "Username": "tlsbuilder",
				"Password": token, "Local": local}, "lein-project")
			home := t.TempDir()
			env := append(clientEnv(home), "LEIN_JVM_OPTS="+javaOpts, "LEIN_HOME="+filepath.Join(home, ".lein"))
			// Only the project's own profile: the default ones add nREPL
			// (a dev dependency), which Debian's repository lacks.
			out, err := runClientErr(project, env, "lein", "with-profile", "production", "deps")
			return out, local, err
		}

		t.Run("http refused", func(t *testing.T) {
			plain := "http://" + strings.TrimPrefix(url, "https://")
			out, _, err := lein(t, plain)
			if err == nil {
				t.Fatalf("lein deps with an http:// repository succeeded:\n%s", lastLines(out, 40))
			}
			if !strings.Contains(out, "Tried to use insecure HTTP repository without TLS") {
				t.Errorf("lein's refusal does not say why:\n%s", lastLines(out, 40))
			}
		})

		t.Run("https", func(t *testing.T) {
			out, local, err := lein(t, url)
			if err != nil {
				t.Fatalf("lein deps over TLS: %v\n%s", err, lastLines(out, 80))
			}
			rel := "org/clojure/clojure/" + clojure + "/clojure-" + clojure + ".jar"
			want, err := os.ReadFile(filepath.Join(fx.Root, rel))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(local, rel))
			if err != nil {
				t.Fatalf("lein deps resolved no %s: %v\n%s", rel, err, lastLines(out, 40))
			}
			if string(got) != string(want) {
				t.Errorf("%s in lein's repository (%d bytes) differs from the upstream's (%d bytes)", rel, len(got), len(want))
			}
			// It came through registryd, which cached it.
			cacheEntry(t, d, upstream, "/"+rel)
		})
	})
}
