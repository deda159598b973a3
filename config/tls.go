package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"registryd/internal/tlsfiles"
)

// TLS is a listener's certificate: with both files set the listener
// speaks TLS only (docs/operations.md, "TLS").
type TLS struct {
	// CertFile is the PEM certificate chain, the server's certificate
	// first. Default "" (no TLS).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of the certificate. Default "".
	KeyFile string `yaml:"key_file"`
	// ReloadInterval is how often the two files are looked at (modification
	// time, size, inode); a change reloads them, as SIGHUP does. A pair that
	// does not load keeps the certificate served. 0 reloads on SIGHUP
	// only. Default 10s.
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// Enabled reports whether the listener serves TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// minReloadInterval bounds tls.reload_interval from below: each look is
// two stat calls, but a few a second is plenty for files an operator or a
// certificate manager replaces.
const minReloadInterval = 100 * time.Millisecond

// validate adds the problems of the listener's TLS settings: both files or
// neither, each readable, together a certificate and its key.
func (t TLS) validate(listener string, add func(string, ...any)) {
	key := func(name string) string {
		return fmt.Sprintf("%s.tls.%s (REGISTRYD_%s_TLS_%s)", listener, name, strings.ToUpper(listener), strings.ToUpper(name))
	}
	if r := t.ReloadInterval; r < 0 || (r > 0 && r < minReloadInterval) {
		add("%s must be 0 (SIGHUP only) or at least %s, got %s", key("reload_interval"), minReloadInterval, r)
	}
	switch {
	case !t.Enabled():
		return
	case t.CertFile == "":
		add("%s is set without %s.tls.cert_file: a TLS listener needs both files (neither for plain HTTP)", key("key_file"), listener)
		return
	case t.KeyFile == "":
		add("%s is set without %s.tls.key_file: a TLS listener needs both files (neither for plain HTTP)", key("cert_file"), listener)
		return
	}
	bad := false
	for _, f := range []struct{ name, path string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if _, err := os.ReadFile(f.path); err != nil {
			add("%s: %s cannot be read: %v", key(f.name), f.path, unwrapPath(err))
			bad = true
		}
	}
	if bad {
		return
	}
	if _, err := tlsfiles.LoadPair(t.CertFile, t.KeyFile); err != nil {
		add("%s: %v", key("cert_file"), err)
	}
}

// unwrapPath drops the path an *os.PathError repeats ("open /x: permission
// denied" -> "permission denied").
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
