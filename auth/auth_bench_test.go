package auth

import (
	"bytes"
	"encoding/base64"
	"testing"

	"registryd/internal/boltstore"
	"registryd/store"
)

// BenchmarkAuthenticateBasic is the per-request cost of a build machine's
// Basic credentials on the download path once the decision is cached.
func BenchmarkAuthenticateBasic(b *testing.B) {
	st, err := boltstore.Open(b.TempDir(), store.Options{SecretKey: bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	u, err := st.CreateUser(store.NewUser{Username: "ci", Name: "ci", Email: "ci@example.com"})
	if err != nil {
		b.Fatal(err)
	}
	plain := NewTokenValue("rdpat-")
	if _, err := st.CreateToken(store.NewToken{UserID: u.ID, Name: "t", Scopes: []string{store.ScopeReadVirtualRegistry}, Plain: plain}); err != nil {
		b.Fatal(err)
	}
	svc := New(st, Options{})
	header := "Basic " + base64.StdEncoding.EncodeToString([]byte("ci:"+plain))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var c Credentials
		c.ParseAuthorization(header)
		if _, err := svc.Authenticate(c, Download); err != nil {
			b.Fatal(err)
		}
	}
}
