package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"registryd/internal/testcert"
)

func TestTLSSettings(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.NewCA("config test CA")
	if err != nil {
		t.Fatal(err)
	}
	one, err := ca.Issue(2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	two, err := ca.Issue(3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := one.Write(dir, "one")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := two.Write(dir, "two")
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	// A good pair on both listeners, from the file and from variables.
	path := writeFile(t, "proxy:\n  tls:\n    cert_file: "+cert+"\n    key_file: "+key+"\n")
	cfg, err := Load(path, []string{"REGISTRYD_ADMIN_TLS_CERT_FILE=" + cert, "REGISTRYD_ADMIN_TLS_KEY_FILE=" + key,
		"REGISTRYD_ADMIN_TLS_RELOAD_INTERVAL=250ms"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Proxy.TLS.Enabled() || !cfg.Admin.TLS.Enabled() || cfg.Admin.TLS.ReloadInterval != 250*time.Millisecond ||
		cfg.Proxy.TLS.ReloadInterval != 10*time.Second {
		t.Errorf("loaded %+v and %+v", cfg.Proxy.TLS, cfg.Admin.TLS)
	}
	// external.url follows the admin listener's scheme.
	if !strings.HasPrefix(cfg.External.URL, "https://") {
		t.Errorf("external.url %q with admin.tls on; want https://", cfg.External.URL)
	}
	if d, _ := Load("", nil); d.Proxy.TLS.Enabled() || d.Admin.TLS.Enabled() || !strings.HasPrefix(d.External.URL, "http://") {
		t.Errorf("defaults: %+v %+v %s", d.Proxy.TLS, d.Admin.TLS, d.External.URL)
	}

	// One file alone, a file that is not there, a key of another
	// certificate, a bad interval: each named with the file's line.
	path = writeFile(t, strings.Join([]string{
		"proxy:",
		"  tls:",
		"    cert_file: " + cert,
		"admin:",
		"  tls:",
		"    cert_file: " + missing,
		"    key_file: " + key,
		"    reload_interval: 1ms",
		"",
	}, "\n"))
	_, err = Load(path, nil)
	wantProblems(t, err,
		path+":3: proxy.tls.cert_file is set without proxy.tls.key_file",
		path+":6: admin.tls.cert_file: "+missing+" cannot be read: no such file or directory",
		path+":8: admin.tls.reload_interval must be 0 (SIGHUP only) or at least 100ms, got 1ms")
	if strings.Contains(err.Error(), "REGISTRYD_") {
		t.Errorf("a problem of the file names a variable:\n%s", err)
	}

	_, err = Load("", []string{"REGISTRYD_PROXY_TLS_CERT_FILE=" + cert, "REGISTRYD_PROXY_TLS_KEY_FILE=" + otherKey})
	wantProblems(t, err, "proxy.tls.cert_file (REGISTRYD_PROXY_TLS_CERT_FILE): "+cert+" and "+otherKey+
		" are not a certificate and its private key: private key does not match public key")

	_, err = Load("", []string{"REGISTRYD_ADMIN_TLS_KEY_FILE=" + key})
	wantProblems(t, err, "admin.tls.key_file (REGISTRYD_ADMIN_TLS_KEY_FILE) is set without admin.tls.cert_file")

	// A file that is not PEM at all.
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load("", []string{"REGISTRYD_PROXY_TLS_CERT_FILE=" + junk, "REGISTRYD_PROXY_TLS_KEY_FILE=" + key})
	wantProblems(t, err, "proxy.tls.cert_file (REGISTRYD_PROXY_TLS_CERT_FILE): "+junk+" and "+key+" are not a certificate and its private key")
}
