package boltkv

import (
	"path/filepath"
	"testing"

	"registryd/store/kv"
	"registryd/store/kv/kvtest"
)

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t testing.TB) kv.DB {
		db, err := Open(filepath.Join(t.TempDir(), "kv.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}
