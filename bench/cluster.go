package main

// The cluster figures (docs/scale-out.md): two registryd nodes on one
// PostgreSQL and one MinIO, both started here on loopback, beside the
// single-node daemon of the other scenarios; skipped, with a line saying
// why, when PostgreSQL's or MinIO's binaries are not installed.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"registryd/internal/testsvc"
)

// benchBucket is the cluster's bucket on the bench's MinIO.
const benchBucket = "registryd-bench"

func (b *bench) cluster() error {
	// The test services of the cluster suite (internal/testsvc): Debian's
	// PostgreSQL and a MinIO binary, each on a loopback port in a temp dir.
	defer testsvc.StopAll()
	pg, err := testsvc.StartPostgres()
	var s3 *testsvc.S3
	if err == nil {
		s3, err = testsvc.StartMinIO()
	}
	if errors.Is(err, testsvc.ErrNotInstalled) {
		b.skip("cluster figures: " + err.Error())
		return nil
	}
	if err == nil {
		err = s3.CreateBucket(benchBucket)
	}
	if err != nil {
		return fmt.Errorf("starting PostgreSQL and MinIO: %w", err)
	}
	env := []string{
		"REGISTRYD_PROXY_ACCESS_LOG=false",
		"REGISTRYD_STORE_BACKEND=postgres",
		"REGISTRYD_STORE_POSTGRES_DSN=" + pg.AdminDSN(),
		"REGISTRYD_BLOBS_BACKEND=s3",
		"REGISTRYD_BLOBS_S3_ENDPOINT=" + s3.Endpoint,
		"REGISTRYD_BLOBS_S3_BUCKET=" + benchBucket,
		"REGISTRYD_BLOBS_S3_ACCESS_KEY_ID=" + s3.AccessKey,
		"REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY=" + s3.SecretKey,
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
	b.add(figure{Scenario: "k", Name: "cross-node miss, " + bigName() + ", from the bucket", Unit: "s", Better: "lower",
		Registryd: median(rt), Baseline: median(bt), Against: "direct from origin", Samples: rt, BSamples: bt,
		Note: "first request on node B for a file filled through node A"})
	return nil
}
