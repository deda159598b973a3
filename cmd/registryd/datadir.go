package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on DATA_DIR/registryd.lock for as
// long as the process runs (the kernel drops it when the process dies).
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "registryd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data.dir %s is in use by another registryd process: give each node its own", dir)
		}
		return nil, fmt.Errorf("data dir: locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
