package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"registryd/config"
)

// clusterConfig is a valid cluster configuration whose database does not
// answer (port 1 on loopback refuses connections).
func clusterConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.Data.Dir = filepath.Join(t.TempDir(), "data")
	cfg.Proxy.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.External.URL = "http://127.0.0.1:1"
	cfg.Store.Backend = config.StorePostgres
	cfg.Store.Postgres.DSN = "postgres://registryd:hunter2@127.0.0.1:1/registryd?connect_timeout=2"
	cfg.Blobs.Backend = config.BlobsS3
	cfg.Blobs.S3.Endpoint = "http://127.0.0.1:1"
	cfg.Blobs.S3.Bucket = "registryd"
	cfg.Blobs.S3.AccessKeyID, cfg.Blobs.S3.SecretAccessKey = "registryd", "s3cr3t-value"
	cfg.Secrets.Key = strings.Repeat("ab", 32)
	cfg.Gateway.Secret = strings.Repeat("g", 32)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A node whose PostgreSQL does not answer fails its start with one line that
// names the database without its password, and logs nothing secret.
func TestStartWithoutPostgres(t *testing.T) {
	var log bytes.Buffer
	err := serve(context.Background(), context.Background(), clusterConfig(t), &log)
	if err == nil {
		t.Fatal("started without its database")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "store.backend postgres: cannot open the index database postgres://registryd:[redacted]@127.0.0.1:1/registryd") ||
		strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
		t.Errorf("start error: %q", msg)
	}
	if strings.Contains(log.String(), "hunter2") || strings.Contains(log.String(), "s3cr3t-value") {
		t.Errorf("the log shows a secret:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "index: PostgreSQL") || !strings.Contains(log.String(), "blobs: S3 bucket") {
		t.Errorf("the log does not name the backends:\n%s", log.String())
	}
}

func TestMigrateCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"migrate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "Usage: registryd migrate --from DATA_DIR --config FILE") {
		t.Errorf("no --from: %d %s", code, errOut.String())
	}
	errOut.Reset()
	t.Setenv("REGISTRYD_CONFIG", "")
	if code := run([]string{"migrate", "--from", t.TempDir()}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "the configuration must describe the cluster") {
		t.Errorf("a single node's configuration: %d %s", code, errOut.String())
	}
}

func TestRedactIn(t *testing.T) {
	dsn := "postgres://u:pw@h/db"
	if got := redactIn("failed to connect to "+dsn+": refused", dsn); got != "failed to connect to postgres://u:[redacted]@h/db: refused" {
		t.Errorf("dsn: %q", got)
	}
	if got := redactIn("bad key s3cr3t", "s3cr3t"); got != "bad key [redacted]" {
		t.Errorf("secret: %q", got)
	}
	if got := oneLine("a\n  b\tc"); got != "a b c" {
		t.Errorf("oneLine: %q", got)
	}
}

// TestOpenBoltLocked: a second open of a single node's index fails fast
// with errLocked, in words an operator understands (moved from store's
// TestOpen, now that cmd opens the engines).
func TestOpenBoltLocked(t *testing.T) {
	dir := t.TempDir()
	db, err := openBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = openBolt(dir)
	if !errors.Is(err, errLocked) {
		t.Fatalf("second open: err = %v, want errLocked", err)
	}
	if !strings.Contains(err.Error(), "in use by another registryd process") {
		t.Fatalf("message %q is not clear", err)
	}
}
