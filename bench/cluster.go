package main

// The cluster figures (docs/scale-out.md): two registryd nodes on one
// PostgreSQL and one MinIO, both started here on loopback, beside the
// single-node daemon of the other scenarios. Needs the merged cluster code
// (store.backend postgres, blobs.backend s3); skipped, with a line saying
// why, when PostgreSQL's or MinIO's binaries are not installed.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	benchS3User   = "registryd-bench"
	benchS3Secret = "registryd-bench-secret"
	benchBucket   = "registryd-bench"
)

// findPostgres is the directory of initdb and postgres: in PATH, or
// Debian's /usr/lib/postgresql/<version>/bin.
func findPostgres() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if fileExists(filepath.Join(dirs[i], "initdb")) {
			return dirs[i]
		}
	}
	return ""
}

// findMinIO is $REGISTRYD_MINIO, minio in PATH, or $(go env GOPATH)/bin/minio.
func findMinIO() string {
	if p := os.Getenv("REGISTRYD_MINIO"); p != "" {
		return p
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		if p := filepath.Join(strings.TrimSpace(string(out)), "bin", "minio"); fileExists(p) {
			return p
		}
	}
	return ""
}

// asPostgresUser runs cmd as the user postgres when the bench runs as root
// (PostgreSQL refuses to run as root).
func asPostgresUser(name string, args ...string) (*exec.Cmd, error) {
	if os.Geteuid() != 0 {
		return exec.Command(name, args...), nil
	}
	if _, err := user.Lookup("postgres"); err != nil {
		return nil, errors.New("running as root and there is no user postgres to run PostgreSQL as")
	}
	return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...), nil
}

type clusterSvc struct {
	dsn, s3 string
	stops   []func()
}

func (c *clusterSvc) stop() {
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
}

// startClusterServices starts a PostgreSQL and a MinIO on loopback in work.
func startClusterServices(work, pgBin, minio string) (*clusterSvc, error) {
	c := &clusterSvc{}
	pgDir := filepath.Join(work, "pg")
	if err := os.MkdirAll(pgDir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "-R", "postgres", pgDir).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chown %s: %v %s", pgDir, err, out)
		}
	}
	initdb, err := asPostgresUser(filepath.Join(pgBin, "initdb"), "-D", filepath.Join(pgDir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8")
	if err != nil {
		return nil, err
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pg, err := asPostgresUser(filepath.Join(pgBin, "postgres"), "-D", filepath.Join(pgDir, "data"), "-p", strconv.Itoa(port),
		"-k", pgDir, "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200")
	if err != nil {
		return nil, err
	}
	pg.Stdout, pg.Stderr = nil, nil
	if err := pg.Start(); err != nil {
		return nil, err
	}
	c.stops = append(c.stops, func() {
		// pg_ctl signals the server itself: runuser (as root) does not
		// pass a signal on.
		if stop, err := asPostgresUser(filepath.Join(pgBin, "pg_ctl"), "stop", "-D", filepath.Join(pgDir, "data"), "-m", "fast", "-w"); err == nil {
			_ = stop.Run()
		}
		done := make(chan struct{})
		go func() { _ = pg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = pg.Process.Kill()
		}
	})
	c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		c.stop()
		return nil, fmt.Errorf("postgres: %w", err)
	}

	mport, err := freePort()
	if err != nil {
		c.stop()
		return nil, err
	}
	m := exec.Command(minio, "server", filepath.Join(work, "minio"), "--address", fmt.Sprintf("127.0.0.1:%d", mport), "--quiet")
	m.Env = append(os.Environ(), "MINIO_ROOT_USER="+benchS3User, "MINIO_ROOT_PASSWORD="+benchS3Secret, "MINIO_BROWSER=off")
	if err := m.Start(); err != nil {
		c.stop()
		return nil, err
	}
	c.stops = append(c.stops, func() { _ = m.Process.Kill(); _ = m.Wait() })
	c.s3 = fmt.Sprintf("http://127.0.0.1:%d", mport)
	if err := waitHTTP(c.s3 + "/minio/health/ready"); err != nil {
		c.stop()
		return nil, fmt.Errorf("minio: %w", err)
	}
	if err := makeBucket(c.s3, benchBucket); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func waitTCP(addr string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr)
		if err == nil {
			res.Body.Close()
			return nil
		}
		// PostgreSQL answers HTTP with garbage: any answer but a refused
		// connection means it listens.
		if !strings.Contains(err.Error(), "connection refused") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not listen after 60s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// makeBucket creates a bucket with one AWS Signature V4 request (the bench
// has no S3 client of its own).
func makeBucket(endpoint, bucket string) error {
	now := time.Now().UTC()
	amzDate, day := now.Format("20060102T150405Z"), now.Format("20060102")
	host := strings.TrimPrefix(endpoint, "http://")
	empty := hex.EncodeToString(sha256Sum(nil))
	canonical := strings.Join([]string{"PUT", "/" + bucket, "",
		"host:" + host, "x-amz-content-sha256:" + empty, "x-amz-date:" + amzDate, "",
		"host;x-amz-content-sha256;x-amz-date", empty}, "\n")
	scope := day + "/us-east-1/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sha256Sum([]byte(canonical)))
	key := []byte("AWS4" + benchS3Secret)
	for _, part := range []string{day, "us-east-1", "s3", "aws4_request"} {
		key = hmacSum(key, part)
	}
	req, _ := http.NewRequest("PUT", endpoint+"/"+bucket, nil)
	req.Header.Set("x-amz-content-sha256", empty)
	req.Header.Set("x-amz-date", amzDate)
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=%s",
		benchS3User, scope, hex.EncodeToString(hmacSum(key, toSign))))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("creating bucket %s: %s", bucket, res.Status)
	}
	return nil
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func hmacSum(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// cluster measures, beside the single node:
//   - a cluster hit: node B serving small files filled through node A, from
//     its local tier (after B's first request for each), against the single
//     node's hits on the same files;
//   - a cross-node miss: the first request on B for a 64 MB file filled
//     through A (streamed from the bucket), against the same file directly
//     from the origin, as scenario c compares a cold miss.
func (b *bench) cluster() error {
	pgBin, minio := findPostgres(), findMinIO()
	if pgBin == "" || minio == "" {
		b.skip("cluster figures: PostgreSQL (initdb; apt-get install postgresql) or MinIO ($REGISTRYD_MINIO, minio in PATH or $(go env GOPATH)/bin/minio) is not installed")
		return nil
	}
	svc, err := startClusterServices(b.work, pgBin, minio)
	if err != nil {
		return fmt.Errorf("starting PostgreSQL and MinIO: %w", err)
	}
	defer svc.stop()
	env := []string{
		"REGISTRYD_PROXY_ACCESS_LOG=false",
		"REGISTRYD_STORE_BACKEND=postgres",
		"REGISTRYD_STORE_POSTGRES_DSN=" + svc.dsn,
		"REGISTRYD_BLOBS_BACKEND=s3",
		"REGISTRYD_BLOBS_S3_ENDPOINT=" + svc.s3,
		"REGISTRYD_BLOBS_S3_BUCKET=" + benchBucket,
		"REGISTRYD_BLOBS_S3_ACCESS_KEY_ID=" + benchS3User,
		"REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY=" + benchS3Secret,
		"REGISTRYD_BLOBS_S3_PATH_STYLE=true",
		"REGISTRYD_SECRETS_KEY=" + strings.Repeat("5a", 32),
		"REGISTRYD_GATEWAY_SECRET=" + strings.Repeat("g", 32),
	}
	bin := filepath.Join(b.work, "registryd")
	nodeA := &daemon{bin: bin, dataDir: filepath.Join(b.work, "node-a"), env: env}
	nodeB := &daemon{bin: bin, dataDir: filepath.Join(b.work, "node-b"), env: env}
	for _, n := range []*daemon{nodeA, nodeB} { // A first: it creates root
		if err := n.start(); err != nil {
			return fmt.Errorf("cluster node: %w", err)
		}
		defer n.stop()
	}
	if err := nodeA.setup(b.origin.URL); err != nil {
		return err
	}
	nodeB.Group, nodeB.Registry, nodeB.Upstream, nodeB.BasicAuth = nodeA.Group, nodeA.Registry, nodeA.Upstream, nodeA.BasicAuth

	// Cluster hit.
	paths := smallPaths()
	if err := warm(nodeA.base(), nodeA.BasicAuth, paths); err != nil {
		return err
	}
	before := b.origin.fetches(paths[0])
	if err := warm(nodeB.base(), nodeB.BasicAuth, paths); err != nil { // from the bucket into B's tier
		return err
	}
	if after := b.origin.fetches(paths[0]); after != before {
		return fmt.Errorf("node B asked the origin for a file node A had filled (%d fetches, then %d)", before, after)
	}
	if err := warm(b.reg.base(), b.reg.BasicAuth, paths); err != nil {
		return err
	}
	rs, bs, err := b.alternate(
		func() (float64, error) {
			return b.load.rps(nodeB.base(), paths, nodeB.BasicAuth, 32, b.o.duration, false)
		},
		func() (float64, error) {
			return b.load.rps(b.reg.base(), paths, b.reg.BasicAuth, 32, b.o.duration, false)
		},
	)
	if err != nil {
		return err
	}
	b.add(figure{Scenario: "k", Name: "cluster hit, random 1 KB of 1,000, filled on another node", Unit: "req/s", Better: "higher",
		Registryd: median(rs), Baseline: median(bs), Against: "single node", Samples: rs, BSamples: bs,
		Note: "node B's local tier, after its first request for each file came from the bucket"})

	// Cross-node miss.
	client := newClient(1)
	var rt, bt []float64
	for i := 0; i < b.o.rounds; i++ {
		p := fmt.Sprintf("/org/bench/cluster/x%d/1.0/x%d-1.0.jar", i, i)
		dp := fmt.Sprintf("/org/bench/cluster/d%d/1.0/d%d-1.0.jar", i, i)
		for _, q := range []string{p, dp} {
			if err := b.link(bigPath, q); err != nil {
				return err
			}
		}
		if r, err := timed(client, nodeA.base()+p, nodeA.BasicAuth); err != nil || r.Status != 200 || r.Bytes != bigSize {
			return fmt.Errorf("fill through node A: %v (status %d)", err, r.Status)
		}
		// The entry is committed (and so the object uploaded) once the
		// .sha1 answers from it.
		if s, err := timed(client, nodeA.base()+p+".sha1", nodeA.BasicAuth); err != nil || s.Status != 200 {
			return fmt.Errorf("waiting for the entry: %v (status %d)", err, s.Status)
		}
		r, err := timed(client, nodeB.base()+p, nodeB.BasicAuth)
		if err != nil || r.Status != 200 || r.Bytes != bigSize {
			return fmt.Errorf("cross-node miss on node B: %v (status %d, %d bytes)", err, r.Status, r.Bytes)
		}
		d, err := timed(client, b.origin.URL+dp, "")
		if err != nil || d.Status != 200 {
			return fmt.Errorf("direct download: %v", err)
		}
		rt, bt = append(rt, r.Total.Seconds()), append(bt, d.Total.Seconds())
	}
	b.add(figure{Scenario: "k", Name: "cross-node miss, 64 MB, from the bucket", Unit: "s", Better: "lower",
		Registryd: median(rt), Baseline: median(bt), Against: "direct from origin", Samples: rt, BSamples: bt,
		Note: "first request on node B for a file filled through node A"})
	return nil
}
