// Package pgkv: STAND-IN of helper "pg"'s package with the agreed signatures,
// so that branch ops builds before the merge. DELETE this file at the merge.
package pgkv

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"registryd/store/kv"
)

// Options as agreed in issue 13.
type Options struct {
	DSN             string
	MaxConns        int32
	Logger          *slog.Logger
	RecheckInterval time.Duration
}

// DB stands in for *pgkv.DB (kv.DB and kv.Cluster).
type DB struct{ kv.DB }

var _ kv.Cluster = (*DB)(nil)

// Open always fails in the stand-in.
func Open(ctx context.Context, o Options) (*DB, error) {
	return nil, errors.New("pgkv stand-in: not merged")
}

func (*DB) Publish(context.Context, []byte) error        { return errors.New("stand-in") }
func (*DB) Subscribe(func([]byte), time.Duration)        {}
func (*DB) Lock(context.Context, string) (func(), error) { return nil, errors.New("stand-in") }
func (*DB) TryLock(context.Context, string) (func(), bool, error) {
	return nil, false, errors.New("stand-in")
}
