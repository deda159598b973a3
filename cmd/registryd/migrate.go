package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"registryd/clustercopy"
	"registryd/config"
	"registryd/store"
	"registryd/store/kv/boltkv"
	"registryd/store/objects"
)

const migrateUsage = `Usage: registryd migrate --from DATA_DIR --config FILE

Copies a stopped single node's state into the cluster FILE configures
(store.backend postgres, blobs.backend s3): its index DATA_DIR/registry.db into
PostgreSQL and its blobs DATA_DIR/blobs/sha256 into the bucket. The cluster's
secrets.key must be the node's DATA_DIR/secrets.key. Resumable: run it again
after an interruption. Verified: key counts and digests per bucket, every
object's size, every blob's SHA-256. Exit status 0 only when all match.
See docs/scale-out.md.
`

func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, migrateUsage) }
	from := fs.String("from", "", "the single node's data directory (stopped)")
	configPath := fs.String("config", os.Getenv("REGISTRYD_CONFIG"), "the cluster's YAML configuration file")
	batch := fs.Int("batch", 1000, "keys per destination transaction")
	uploads := fs.Int("uploads", 4, "blobs uploaded at once")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *from == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	cfg, err := config.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "registryd migrate: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := migrateNode(ctx, cfg, *from, *batch, *uploads, stdout); err != nil {
		fmt.Fprintf(stderr, "registryd migrate: %v\n", err)
		return 1
	}
	return 0
}

func migrateNode(ctx context.Context, cfg config.Config, from string, batch, uploads int, out io.Writer) error {
	if cfg.Store.Backend != config.StorePostgres || cfg.Blobs.Backend != config.BlobsS3 {
		return errors.New("the configuration must describe the cluster: store.backend postgres and blobs.backend s3")
	}
	dbPath := filepath.Join(from, "registry.db")
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("--from %s: %w (the single node's data.dir holds registry.db)", from, err)
	}
	key, err := cfg.Secrets.SecretKey()
	if err != nil {
		return err
	}
	// The store's own key check: the cluster's key must open what the node
	// sealed (upstream passwords), or they would be unreadable after the
	// move. Opening also brings the node's schema to this version, as its
	// next start would.
	srcEngine, err := openBolt(from)
	var st *store.Store
	if err == nil {
		st, err = store.Open(store.Options{SecretKey: key, Engine: srcEngine})
	}
	switch {
	case errors.Is(err, store.ErrWrongKey):
		return fmt.Errorf("the cluster's secrets key is not the one %s was created with: set the cluster's secrets.key "+
			"(or secrets.key_file) to the node's %s, on every node", from, filepath.Join(from, "secrets.key"))
	case errors.Is(err, errLocked):
		return fmt.Errorf("%s is in use: stop the single node's registryd first, and keep it stopped", from)
	case err != nil:
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}

	src, err := boltkv.Open(dbPath, boltkv.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("opening %s: %w", dbPath, err)
	}
	defer src.Close()
	dst, err := openEngine(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	// The store takes the engine over at the last check below (its Close, or
	// a failed Open, closes it); until then this function closes it.
	handedOver := false
	defer func() {
		if !handedOver {
			dst.Close()
		}
	}()
	objs, err := openObjects(ctx, cfg)
	if err != nil {
		return err
	}
	started := time.Now()
	r, err := clustercopy.Run(ctx, clustercopy.Options{
		Source: src, Dest: dst,
		BlobDir: filepath.Join(from, "blobs", "sha256"), Objects: bucketAdapter{objs},
		BatchKeys: batch, Uploads: uploads, Log: out,
	})
	printSummary(out, r, time.Since(started))
	if err != nil {
		return err
	}
	// The cluster opens the copy with its key (what every node does at
	// start), the last check.
	handedOver = true
	cst, err := openStore(key, dst, cfg.Store)
	if err != nil {
		return fmt.Errorf("the copied index does not open with the cluster's configuration: %w", err)
	}
	return cst.Close()
}

func printSummary(out io.Writer, r *clustercopy.Result, took time.Duration) {
	if r == nil {
		return
	}
	fmt.Fprintf(out, "\nsource installation %s\n", r.Source)
	fmt.Fprintf(out, "index: %d buckets, %d keys copied in %d batches (resumed: %v)\n", r.Buckets, r.KeysCopied, r.Batches, r.Resumed)
	names := make([]string, 0, len(r.SourceBuckets))
	for n := range r.SourceBuckets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s, d := r.SourceBuckets[n], r.DestBuckets[n]
		mark := "ok"
		if s != d {
			mark = "DIFFERS"
		}
		fmt.Fprintf(out, "  %-28s %8d keys  sha256 %.12s  %s\n", n, s.Keys, s.SHA256, mark)
	}
	fmt.Fprintf(out, "blobs: %d files, %d uploaded (%d bytes), %d present already\n",
		r.BlobsTotal, r.BlobsUploaded, r.BytesUploaded, r.BlobsSkipped)
	for _, m := range r.Mismatches {
		fmt.Fprintf(out, "MISMATCH: %s\n", m)
	}
	if len(r.Mismatches) == 0 && r.DestBuckets != nil {
		fmt.Fprintf(out, "verified: the cluster holds the node's index and blobs (%s)\n", took.Round(time.Millisecond))
	}
}

// bucketAdapter gives clustercopy the object store in its own terms.
type bucketAdapter struct{ s objects.Store }

func (b bucketAdapter) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return b.s.Put(ctx, key, r, size)
}

func (b bucketAdapter) Delete(ctx context.Context, key string) error { return b.s.Delete(ctx, key) }

func (b bucketAdapter) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	return b.s.List(ctx, prefix, func(i objects.Info) error { return fn(i.Key, i.Size) })
}
