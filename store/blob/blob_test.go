package blob

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// blobEnv is a blob store on a test volume.
type blobEnv struct {
	b      *Store
	faults *Faults // of b
}

func newBlobEnv(t *testing.T) blobEnv {
	t.Helper()
	faults := &Faults{}
	b, err := Open(t.TempDir(), Options{Faults: faults})
	noErr(t, err)
	return blobEnv{b: b, faults: faults}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// finished writes content to a new blob writer in two chunks and finishes it.
func (e blobEnv) finished(t testing.TB, content string) (*Writer, Digests) {
	t.Helper()
	w, err := e.b.Create()
	noErr(t, err)
	half := len(content) / 2
	for _, part := range []string{content[:half], content[half:]} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := w.Finish()
	noErr(t, err)
	return w, d
}

func sha(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:])
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestOpenBlobsClearsTmp(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	noErr(t, os.MkdirAll(filepath.Join(tmp, "sub"), 0o750))
	noErr(t, os.WriteFile(filepath.Join(tmp, "blob-123"), []byte("half a jar"), 0o600))
	noErr(t, os.WriteFile(filepath.Join(tmp, "sub", "x"), []byte("x"), 0o600))
	b, err := Open(dir, Options{})
	noErr(t, err)
	ents, err := os.ReadDir(b.TempDir())
	noErr(t, err)
	if len(ents) != 0 {
		t.Fatalf("tmp holds %d entries after Open, want 0", len(ents))
	}
	if !exists(filepath.Join(dir, "blobs", "sha256")) {
		t.Fatal("blobs/sha256 was not created")
	}
}

func TestBlobWriterDigests(t *testing.T) {
	e := newBlobEnv(t)
	for _, content := range []string{"", "x", "hello, maven\n", string(make([]byte, 300<<10))} {
		t.Run(fmt.Sprintf("len%d", len(content)), func(t *testing.T) {
			w, d := e.finished(t, content)
			defer w.Abort()
			m, s1, s5 := md5.Sum([]byte(content)), sha1.Sum([]byte(content)), sha512.Sum512([]byte(content))
			want := Digests{Size: int64(len(content)), MD5: hex.EncodeToString(m[:]), SHA1: hex.EncodeToString(s1[:]),
				SHA256: sha(content), SHA512: hex.EncodeToString(s5[:])}
			if d != want {
				t.Fatalf("digests = %+v\nwant %+v", d, want)
			}
			raw, err := os.ReadFile(w.Name())
			noErr(t, err)
			if string(raw) != content {
				t.Fatalf("temp file holds %d bytes, want %d", len(raw), len(content))
			}
		})
	}
}

func TestAbortRemovesTemp(t *testing.T) {
	e := newBlobEnv(t)
	w, err := e.b.Create()
	noErr(t, err)
	_, _ = w.Write([]byte("partial"))
	name := w.Name()
	w.Abort()
	w.Abort() // twice is fine
	if exists(name) {
		t.Fatal("temp file survived Abort")
	}
}

func TestValidDigest(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{sha("x"), true},
		{"", false},
		{sha("x")[:63], false},
		{"../" + sha("x")[3:], false},
		{"AB" + sha("x")[2:], false},
	} {
		if got := ValidDigest(c.in); got != c.want {
			t.Errorf("ValidDigest(%q) = %v", c.in, got)
		}
	}
}
