package store

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"registryd/store/blob"
	"registryd/store/kv"
)

// rootUsername is the admin user created on first start.
const rootUsername = "root"

// EnsureRoot creates, on an empty database, the admin user root and a
// personal access token with scope api whose value is plain, in one
// transaction. created is false when the database was already initialised.
func (s *Store) EnsureRoot(plain string) (created bool, err error) {
	now := s.clock()
	err = s.update(true, false, func(tx kv.Tx) error {
		created = false // kv may run the function again
		meta := tx.Bucket(bktMeta)
		if first, _ := tx.Bucket(bktUsers).Cursor().First(); meta.Get(metaInitialized) != nil || first != nil {
			return nil
		}
		u, err := createUserTx(tx, User{Username: rootUsername, Name: "Administrator", Email: "admin@example.com",
			Admin: true, State: "active", CreatedAt: now})
		if err != nil {
			return err
		}
		if _, err := createTokenTx(tx, Token{UserID: u.ID, Name: "initial root token", Scopes: []string{ScopeAPI},
			Hash: hashToken(plain), CreatedAt: now}); err != nil {
			return err
		}
		created = true
		return meta.Put(metaInitialized, itob(now.UnixMilli()))
	})
	return created, err
}

// Initialized reports whether root was created already.
func (s *Store) Initialized() bool {
	done := false
	_ = s.db.View(func(tx kv.Tx) error {
		done = tx.Bucket(bktMeta).Get(metaInitialized) != nil
		return nil
	})
	return done
}

// LoadOrCreateSecret reads a secret file of exactly size random bytes, or
// creates one (mode 0600) when it does not exist. A file of the wrong size is
// an error: silently replacing it would make sealed data unreadable.
func LoadOrCreateSecret(path string, size int) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(b) != size {
			return nil, fmt.Errorf("%s: expected %d bytes, found %d: restore the original file", path, size, len(b))
		}
		return b, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	b = make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(path, b, 0o600); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteFileAtomic writes data to a temp file beside path, fsyncs it, renames
// it over path and fsyncs the directory, so a crash leaves the old file or the
// new one, never a torn one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return blob.SyncDir(path)
}
