package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"registryd/config"
	"registryd/store"
	"registryd/store/blob"
	"registryd/store/kv"
	"registryd/store/kv/boltkv"
	"registryd/store/kv/pgkv"
	"registryd/store/objects"
)

// startTimeout bounds reaching PostgreSQL and the bucket at start: an
// address that does not answer fails the start with a line naming it,
// rather than hanging a service manager.
const startTimeout = 30 * time.Second

// errLocked is a single node's index held by another process.
var errLocked = errors.New("the data directory is in use by another registryd process")

// boltLockTimeout is how long a start waits for another process's lock on
// DATA_DIR/registry.db before failing.
const boltLockTimeout = time.Second

// openEngine opens the index engine store.backend names: a boltkv.DB on
// DATA_DIR/registry.db for bolt, a pgkv.DB for postgres. The error is one
// line that names what failed, without the password.
func openEngine(ctx context.Context, cfg config.Config, log *slog.Logger) (kv.DB, error) {
	if cfg.Store.Backend != config.StorePostgres {
		return openBolt(cfg.Data.Dir)
	}
	dsn, err := cfg.Store.Postgres.ConnString()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	db, err := pgkv.Open(ctx, pgkv.Options{
		DSN:             dsn,
		MaxConns:        int32(cfg.Store.Postgres.MaxConns),
		MaxLocks:        int32(cfg.Store.Postgres.MaxLocks),
		Logger:          log,
		RecheckInterval: cfg.Store.Postgres.RecheckInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("store.backend postgres: cannot open the index database %s: %s",
			config.RedactDSN(dsn), oneLine(redactIn(err.Error(), dsn)))
	}
	return db, nil
}

// openBolt opens the bbolt index of the data directory dir,
// DIR/registry.db, creating dir when needed; another process holding it
// fails with errLocked.
func openBolt(dir string) (kv.DB, error) {
	if err := blob.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(dir, "registry.db")
	_, statErr := os.Stat(path)
	db, err := boltkv.Open(path, boltkv.Options{Timeout: boltLockTimeout, AppendMostly: store.AppendMostly()})
	if errors.Is(err, boltkv.ErrLocked) {
		return nil, fmt.Errorf("store: %s: %w", path, errLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// bbolt fsyncs the file it creates, not the directory entry naming it:
	// without this, a power cut after the first admin writes could leave a
	// data directory without its index (found by TestCrashPoints).
	if errors.Is(statErr, fs.ErrNotExist) {
		if err := blob.SyncDir(dir); err != nil {
			db.Close()
			return nil, fmt.Errorf("store: fsync %s: %w", dir, err)
		}
	}
	return db, nil
}

// openObjects connects to the bucket blobs.backend s3 names and checks that
// it answers (a listing of at most one key), so that a wrong endpoint, bucket
// or key fails the start instead of the first miss.
func openObjects(ctx context.Context, cfg config.Config) (objects.Store, error) {
	s3 := cfg.Blobs.S3
	id, secret, err := s3.Credentials()
	if err != nil {
		return nil, err
	}
	objs, err := objects.NewS3(objects.S3Options{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: s3.Region,
		AccessKeyID: id, SecretAccessKey: secret, PathStyle: s3.PathStyle, Prefix: s3.Prefix,
	})
	if err != nil {
		return nil, fmt.Errorf("blobs.backend s3: bucket %q at %s: %s", s3.Bucket, s3.Endpoint, oneLine(redactIn(err.Error(), secret)))
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	errFound := errors.New("found one")
	if err := objs.List(ctx, "", func(objects.Info) error { return errFound }); err != nil && !errors.Is(err, errFound) {
		return nil, fmt.Errorf("blobs.backend s3: bucket %q at %s does not answer: %s", s3.Bucket, s3.Endpoint,
			oneLine(redactIn(err.Error(), secret)))
	}
	return objs, nil
}

// openBlobs opens the blob tier blobs.backend names: DATA_DIR/blobs, or
// the bucket with this node's local tier under DATA_DIR. Fills take the
// cluster-wide lease of a blob through st, so that one node uploads it.
func openBlobs(ctx context.Context, cfg config.Config, st *store.Store) (*blob.Store, error) {
	if cfg.Blobs.Backend != config.BlobsS3 {
		return blob.Open(cfg.Data.Dir, blob.Options{})
	}
	objs, err := openObjects(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return blob.OpenTiered(cfg.Data.Dir, blob.TieredOptions{
		Objects:         objs,
		LocalCacheBytes: int64(cfg.Blobs.S3.LocalCacheBytes),
		Lock:            st.Lease,
		OrphanGrace:     cfg.Blobs.S3.OrphanGrace,
	})
}

// logBackends says at start where the index and the blobs are; secrets are
// redacted by the config types' LogValue.
func logBackends(log *slog.Logger, cfg config.Config) {
	switch cfg.Store.Backend {
	case config.StorePostgres:
		log.Info("index: PostgreSQL, shared by the cluster", "postgres", cfg.Store.Postgres)
	default:
		log.Info("index: bbolt", "path", cfg.Path("registry.db"))
	}
	switch cfg.Blobs.Backend {
	case config.BlobsS3:
		log.Info("blobs: S3 bucket with a local tier", "s3", cfg.Blobs.S3, "local_dir", cfg.Data.Dir)
	default:
		log.Info("blobs: disk", "path", cfg.Path("blobs"))
	}
}

// oneLine keeps a driver's multi-line error on the one line of the start
// failure.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// redactIn removes secret from a driver's message, in case a driver quotes
// its input: a DSN is replaced by its redacted form, anything else by
// [redacted].
func redactIn(msg, secret string) string {
	if secret == "" {
		return msg
	}
	r := config.RedactDSN(secret)
	if r == secret {
		r = "[redacted]"
	}
	return strings.ReplaceAll(msg, secret, r)
}
