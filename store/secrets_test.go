package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"registryd/store/kv"
)

// rawUpstream is the stored JSON of an upstream, read past the store's API.
func rawUpstream(t *testing.T, s *Store, id int64) []byte {
	t.Helper()
	var raw []byte
	if err := s.db.View(func(tx kv.Tx) error {
		raw = bytes.Clone(tx.Bucket(bktUpstreams).Get(itob(id)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if raw == nil {
		t.Fatalf("no stored upstream %d", id)
	}
	return raw
}

func TestPasswordSealedAtRest(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	const password = "correct-horse-battery-staple"
	a := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://a.example/m", Name: "a", Username: "bot", Password: password}))(t)
	b := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://b.example/m", Name: "b", Username: "bot", Password: password}))(t)

	if rawContains(t, s, []byte(password)) {
		t.Fatal("the plaintext password is somewhere in the database")
	}
	rawA, rawB := rawUpstream(t, s, a.ID), rawUpstream(t, s, b.ID)
	var storedA, storedB map[string]any
	if err := json.Unmarshal(rawA, &storedA); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rawB, &storedB); err != nil {
		t.Fatal(err)
	}
	if _, has := storedA["password"]; has {
		t.Fatalf("stored upstream has a password field: %s", rawA)
	}
	if storedA["password_sealed"] == nil || storedA["password_sealed"] == storedB["password_sealed"] {
		t.Fatalf("sealed passwords %v and %v: want present and different (a fresh nonce each time)",
			storedA["password_sealed"], storedB["password_sealed"])
	}

	// Every reader that needs the password gets it back.
	if got := ok(s.Upstream(a.ID))(t); got.Password != password || got.Username != "bot" {
		t.Fatalf("Upstream: user %q password %q", got.Username, got.Password)
	}
	for _, u := range ok(s.RegistryUpstreams(r.ID))(t) {
		if u.Password != password {
			t.Fatalf("RegistryUpstreams: password %q", u.Password)
		}
	}
	// An update that does not touch the password keeps it sealed and intact.
	name := "renamed"
	ok(s.UpdateUpstream(a.ID, UpstreamPatch{Name: &name}))(t)
	if got := ok(s.Upstream(a.ID))(t); got.Password != password {
		t.Fatalf("password after an update of the name: %q", got.Password)
	}
	if rawContains(t, s, []byte(password)) {
		t.Fatal("an update wrote the plaintext password")
	}
}

func TestTokenValuesNotStored(t *testing.T) {
	s, _ := openTest(t)
	const rootPlain, patPlain, deployPlain = "rdpat-root-plain-value-1234", "rdpat-user-plain-value-5678", "rddt-deploy-plain-value-9012"
	if created := ok(s.EnsureRoot(rootPlain))(t); !created {
		t.Fatal("EnsureRoot on an empty store created nothing")
	}
	u := ok(s.CreateUser(NewUser{Username: "alice", Name: "Alice", Email: "alice@example.com", Password: "s3cret-password"}))(t)
	ok(s.CreateToken(NewToken{UserID: u.ID, Name: "t", Scopes: []string{ScopeAPI}, Plain: patPlain}))(t)
	g := topGroup(t, s, "acme")
	ok(s.CreateDeployToken(NewDeployToken{GroupID: g.ID, Name: "d", Scopes: []string{ScopeReadVirtualRegistry}, Plain: deployPlain}))(t)
	for _, secret := range []string{rootPlain, patPlain, deployPlain, "s3cret-password"} {
		if rawContains(t, s, []byte(secret)) {
			t.Fatalf("%q is stored in the clear", secret)
		}
	}
	tok, user := func() (Token, User) {
		tk, us, err := s.TokenByHash(hashToken(patPlain))
		if err != nil {
			t.Fatal(err)
		}
		return tk, us
	}()
	if user.ID != u.ID || tok.UserID != u.ID {
		t.Fatalf("TokenByHash: token %+v user %+v", tok, user)
	}
	if ok(s.DeployTokenByHash(hashToken(deployPlain)))(t).GroupID != g.ID {
		t.Fatal("DeployTokenByHash found the wrong token")
	}
}

func TestWrongKeyFailsClearly(t *testing.T) {
	dir := t.TempDir()
	s, err := openAt(t, dir, Options{SecretKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://a.example/m", Name: "a", Username: "bot", Password: "pw"}))(t)
	noErr(t, s.Close())

	_, err = openAt(t, dir, Options{SecretKey: otherKey})
	if !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key: err = %v, want ErrWrongKey", err)
	}
	if !strings.Contains(err.Error(), "secrets key does not match") {
		t.Fatalf("message %q does not say what is wrong", err)
	}

	// The right key still opens it, passwords intact.
	s, err = openAt(t, dir, Options{SecretKey: testKey})
	if err != nil {
		t.Fatalf("reopening with the right key: %v", err)
	}
	defer s.Close()
	if ups := ok(s.RegistryUpstreams(r.ID))(t); len(ups) != 1 || ups[0].Password != "pw" {
		t.Fatalf("after reopening: %+v", ups)
	}
}

func TestSealerRejectsForeignCiphertext(t *testing.T) {
	a, err := newSealer(testKey)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSealer(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	sealed := a.seal("pw")
	tests := []struct {
		name   string
		sealer *sealer
		in     []byte
		want   string
		err    error
	}{
		{"own key", a, sealed, "pw", nil},
		{"empty is no password", b, nil, "", nil},
		{"other key", b, sealed, "", errBadKey},
		{"truncated", a, sealed[:5], "", errBadKey},
		{"tampered", a, append(bytes.Clone(sealed[:len(sealed)-1]), sealed[len(sealed)-1]^1), "", errBadKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sealer.open(tc.in)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("open = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if a.seal("") != nil {
		t.Fatal("sealing no password should store nothing")
	}
}

func TestOpen(t *testing.T) {
	t.Run("key of the wrong size", func(t *testing.T) {
		if _, err := openAt(t, t.TempDir(), Options{SecretKey: []byte("short")}); err == nil || !strings.Contains(err.Error(), "32 bytes") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("database from a newer registryd", func(t *testing.T) {
		dir := t.TempDir()
		s, err := openAt(t, dir, Options{SecretKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		noErr(t, s.db.Update(func(tx kv.Tx) error {
			return tx.Bucket(bktMeta).Put(metaSchemaVersion, itob(schemaVersion+1))
		}))
		noErr(t, s.Close())
		if _, err := openAt(t, dir, Options{SecretKey: testKey}); err == nil || !strings.Contains(err.Error(), "upgrade registryd") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("reopen keeps records", func(t *testing.T) {
		dir := t.TempDir()
		s, err := openAt(t, dir, Options{SecretKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		g := topGroup(t, s, "acme")
		noErr(t, s.Close())
		s, err = openAt(t, dir, Options{SecretKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := ok(s.GroupByRef("ACME"))(t); got != g {
			t.Fatalf("after reopen: %+v, want %+v", got, g)
		}
		if testEngine(t) != nil {
			return // no registry.db file: the mode check is bbolt's
		}
		if fi, err := os.Stat(filepath.Join(dir, "registry.db")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("registry.db: %v %v, want mode 0600", fi.Mode(), err)
		}
	})
}

func TestLoadOrCreateSecret(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.key")
	first, err := LoadOrCreateSecret(path, 32)
	if err != nil || len(first) != 32 {
		t.Fatalf("create: %d bytes, %v", len(first), err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets.key mode %v (%v), want 0600", fi.Mode(), err)
	}
	again, err := LoadOrCreateSecret(path, 32)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatalf("second load returned another key (%v)", err)
	}
	noErr(t, os.WriteFile(path, []byte("short"), 0o600))
	if _, err := LoadOrCreateSecret(path, 32); err == nil || !strings.Contains(err.Error(), "restore the original file") {
		t.Fatalf("a damaged key file: err = %v", err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a temp file was left behind: %v", err)
	}
}
