package blob

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"registryd/internal/testsvc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.StopAllS3()
	os.Exit(code)
}

// TestTiers holds the peers (Disk, Bucket) and their composition (Tiered)
// to the one Tier contract: Put stores a finished file once, Get and Stat
// find it at its size, List names it, Delete removes it and says its size,
// and a blob that is not there is ErrNotFound everywhere.
func TestTiers(t *testing.T) {
	obj := testsvc.ObjectStore(t).NewObjects(t, "tiers/")
	tiers := map[string]func(t *testing.T) (Tier, string){
		"disk": func(t *testing.T) (Tier, string) {
			d, err := openDisk(t.TempDir(), nil)
			noErr(t, err)
			return d, d.TempDir()
		},
		"bucket": func(t *testing.T) (Tier, string) {
			return newBucket(obj), t.TempDir()
		},
		"tiered": func(t *testing.T) (Tier, string) {
			s, err := OpenTiered(t.TempDir(), TieredOptions{Objects: obj, LocalCacheBytes: 1 << 20})
			noErr(t, err)
			return s.tier, s.TempDir()
		},
	}
	for name, open := range tiers {
		t.Run(name, func(t *testing.T) {
			tier, tmpDir := open(t)
			ctx := context.Background()
			content := name + ": the bytes of one blob"
			digest := sha(content)
			put := func() bool {
				t.Helper()
				tmp := filepath.Join(tmpDir, "put-"+name)
				noErr(t, os.WriteFile(tmp, []byte(content), 0o600))
				defer os.Remove(tmp)
				created, err := tier.Put(ctx, tmp, digest, int64(len(content)))
				noErr(t, err)
				return created
			}
			if !put() {
				t.Fatal("the first Put did not create the blob")
			}
			if put() {
				t.Fatal("a second Put of the same bytes created it again")
			}
			if n, err := tier.Stat(ctx, digest); err != nil || n != int64(len(content)) {
				t.Fatalf("Stat = %d, %v", n, err)
			}
			r, err := tier.Get(ctx, digest, int64(len(content)))
			noErr(t, err)
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || string(got) != content {
				t.Fatalf("Get read %q, %v", got, err)
			}
			listed := false
			noErr(t, tier.List(ctx, func(i Info) error {
				listed = listed || i.SHA256 == digest && i.Size == int64(len(content))
				return nil
			}))
			if !listed {
				t.Fatal("List did not name the blob")
			}
			if n, err := tier.Delete(ctx, digest); err != nil || n != int64(len(content)) {
				t.Fatalf("Delete = %d, %v", n, err)
			}
			if _, err := tier.Stat(ctx, digest); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Stat after Delete: %v", err)
			}
			if _, err := tier.Get(ctx, digest, int64(len(content))); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after Delete: %v", err)
			}
			if _, err := tier.Delete(ctx, digest); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Delete of a missing blob: %v", err)
			}
		})
	}
}
