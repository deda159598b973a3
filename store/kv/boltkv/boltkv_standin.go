// Package boltkv: STAND-IN of helper "kv"'s package with the agreed
// signatures, so that branch ops builds before the merge. DELETE this file at
// the merge.
package boltkv

import (
	"errors"
	"time"

	"registryd/store/kv"
)

// ErrLocked as agreed: bolt's timeout error wraps it.
var ErrLocked = errors.New("boltkv stand-in: locked")

// Options as agreed in issue 13.
type Options struct{ Timeout time.Duration }

// DB stands in for *boltkv.DB.
type DB struct{ kv.DB }

// Open always fails in the stand-in.
func Open(path string, o Options) (*DB, error) { return nil, errors.New("boltkv stand-in: not merged") }
