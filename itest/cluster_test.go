package itest

// The cluster suite: three registryd nodes on one real PostgreSQL (Debian's)
// and one real S3 server (MinIO, or versitygw with REGISTRYD_TEST_S3=versitygw),
// all on loopback, started by the tests. Run alone with
// `go test -count=1 -run Cluster ./itest/` (make test-cluster runs it against both).

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/internal/testsvc"
)

// cluster is n nodes sharing one database and one bucket.
type cluster struct {
	pg    *testsvc.PG
	s3    *testsvc.S3
	env   map[string]string
	nodes []*Daemon
}

// clusterEnv is the configuration every node of one cluster shares: the
// database, the bucket, the secrets key and the gateway secret.
func clusterEnv(t *testing.T, pg *testsvc.PG, s3 *testsvc.S3) map[string]string {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	return map[string]string{
		"REGISTRYD_STORE_BACKEND":                   "postgres",
		"REGISTRYD_STORE_POSTGRES_DSN":              pg.NewDatabase(t),
		"REGISTRYD_BLOBS_BACKEND":                   "s3",
		"REGISTRYD_BLOBS_S3_ENDPOINT":               s3.Endpoint,
		"REGISTRYD_BLOBS_S3_BUCKET":                 s3.NewBucket(t),
		"REGISTRYD_BLOBS_S3_REGION":                 "us-east-1",
		"REGISTRYD_BLOBS_S3_ACCESS_KEY_ID":          s3.AccessKey,
		"REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY":      s3.SecretKey,
		"REGISTRYD_BLOBS_S3_PATH_STYLE":             "true",
		"REGISTRYD_BLOBS_S3_LOCAL_CACHE_BYTES":      "67108864",
		"REGISTRYD_SECRETS_KEY":                     hex.EncodeToString(key),
		"REGISTRYD_GATEWAY_SECRET":                  "a-cluster-gateway-secret-of-40-characters",
		"REGISTRYD_STORE_POSTGRES_RECHECK_INTERVAL": "1s",
	}
}

func startCluster(t *testing.T, n int, extra map[string]string) *cluster {
	t.Helper()
	c := &cluster{pg: testsvc.Postgres(t), s3: testsvc.ObjectStore(t)}
	c.env = clusterEnv(t, c.pg, c.s3)
	for k, v := range extra {
		c.env[k] = v
	}
	for i := 0; i < n; i++ {
		c.nodes = append(c.nodes, Start(t, c.env))
	}
	return c
}

// metricSum adds every sample of the metric name whose labels contain
// every one of labels, in a node's exposition (0 when there is none).
func metricSum(t *testing.T, d *Daemon, name string, labels ...string) float64 {
	t.Helper()
	return metricSumIn(d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body, name, labels...)
}

// metricSumIn is metricSum over an exposition already read.
func metricSumIn(body []byte, name string, labels ...string) float64 {
	var sum float64
next:
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				continue next
			}
		}
		var v float64
		if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// eventually polls cond until it holds or the deadline passes, and returns
// how long it took.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	return time.Since(start)
}

// TestClusterCrossNode: a registry made on node A serves downloads on C;
// a file filled through A is a hit on B with zero upstream requests, the
// second time from B's local tier.
func TestClusterCrossNode(t *testing.T) {
	c := startCluster(t, 3, nil)
	a, b, cc := c.nodes[0], c.nodes[1], c.nodes[2]
	f := a.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("lib", 300<<10)
	up.set(pxJar, pxFile{body: body})
	f.Upstream(reg, up.URL, nil)

	other := "org/example/lib/2.0/lib-2.0.jar"
	body2 := pxBody("two", 200<<10)
	up.set(other, pxFile{body: body2})
	if got := cc.pxGet(t, reg, other, "PRIVATE-TOKEN", rootToken).Expect(t, 200).Body; !bytes.Equal(got, body2) {
		t.Fatalf("node C (registry made on A): %d bytes", len(got))
	}

	if got := a.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200).Body; !bytes.Equal(got, body) {
		t.Fatalf("fill through A: %d bytes", len(got))
	}
	// The sidecar answers from the stored entry: after it the entry is in
	// the index, and so the object in the bucket.
	a.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	for i := 0; i < 2; i++ {
		got := b.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		if !bytes.Equal(got.Body, body) {
			t.Fatalf("hit %d on B: %d bytes", i, len(got.Body))
		}
	}
	if n := up.calls(pxJar); n != 1 {
		t.Fatalf("upstream GETs = %d, want 1 (the fill through A)", n)
	}
	if n := up.calls(other); n != 1 {
		t.Fatalf("upstream GETs of the file filled through C = %d, want 1", n)
	}
	if hits := metricSum(t, b, "registryd_cache_lookups_total", `kind="artifact"`, `result="hit"`, `registry="`+itoa(reg)+`"`); hits != 2 {
		t.Fatalf("B counted %v artifact hits, want 2", hits)
	}
}

// TestClusterHerd: 64 concurrent misses of one file spread over three nodes
// make exactly one upstream GET; every client gets the whole file.
func TestClusterHerd(t *testing.T) {
	c := startCluster(t, 3, nil)
	f := c.nodes[0].Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("herd", 1<<20)
	up.set(pxJar, pxFile{body: body, hold: true})
	f.Upstream(reg, up.URL, nil)

	const n = 64
	var wg sync.WaitGroup
	bodies := make([][]byte, n)
	statuses := make([]int, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, c.nodes[i%3].pxURL(reg, pxJar), nil)
			req.Header.Set("PRIVATE-TOKEN", rootToken)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			statuses[i] = res.StatusCode
			bodies[i], errs[i] = io.ReadAll(res.Body)
		}(i)
	}
	// One node is filling (half the body sent); the other two wait on the
	// cluster's lease for the file: then let the body finish.
	<-up.midBody
	eventually(t, 20*time.Second, "the two other nodes waiting on the fill lease", func() bool {
		waiting := 0
		for _, d := range c.nodes {
			if metricSum(t, d, "registryd_cluster_fill_lease_waits_total") > 0 {
				waiting++
			}
		}
		return waiting >= 2
	})
	up.releaseHeld()
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil || statuses[i] != 200 || !bytes.Equal(bodies[i], body) {
			t.Fatalf("client %d (node %d): status %d, %d bytes, err %v", i, i%3, statuses[i], len(bodies[i]), errs[i])
		}
	}
	if got := up.calls(pxJar); got != 1 {
		t.Fatalf("upstream GETs = %d for %d concurrent misses on 3 nodes, want 1", got, n)
	}
	// Every lease was given back (each holds a PostgreSQL connection).
	for i, d := range c.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d's leases released", i), func() bool {
			return bytes.Contains(d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body, []byte("\nregistryd_cluster_locks_held 0\n"))
		})
	}
}

// TestClusterRevocation: a token revoked or a cache entry deleted on A stops
// working on B and C within about a second.
func TestClusterRevocation(t *testing.T) {
	c := startCluster(t, 3, nil)
	a, b, cc := c.nodes[0], c.nodes[1], c.nodes[2]
	f := a.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	v1 := pxBody("one", 64<<10)
	up.set(pxJar, pxFile{body: v1, etag: `"v1"`})
	upID := f.Upstream(reg, up.URL, nil)
	uid := a.Do("POST", "/users", rootToken, map[string]any{
		"username": "alice", "name": "Alice", "email": "alice@example.com", "admin": true,
	}).Expect(t, 201).ID(t)
	tr := a.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", uid), rootToken,
		map[string]any{"name": "ci", "scopes": []string{"read_virtual_registry"}}).Expect(t, 201)
	tokID, tok := tr.ID(t), registerSecret("alice's token", tr.Map(t)["token"].(string))

	// Warm every node's decision and entry caches.
	a.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", tok).Expect(t, 200)
	a.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", tok).Expect(t, 200)
	for _, d := range []*Daemon{b, cc} {
		d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", tok).Expect(t, 200)
	}

	// A cache entry deleted on A: B and C stop serving the stored copy.
	v2 := pxBody("two", 64<<10)
	up.set(pxJar, pxFile{body: v2, etag: `"v2"`})
	var entries []map[string]any
	a.Do("GET", "/virtual_registries/packages/maven/upstreams/"+itoa(upID)+"/cache_entries", rootToken, nil).
		Expect(t, 200).JSON(t, &entries)
	if len(entries) != 1 {
		t.Fatalf("entries: %v", entries)
	}
	a.Do("DELETE", "/virtual_registries/packages/maven/cache_entries/"+entries[0]["id"].(string), rootToken, nil).Expect(t, 204)
	for _, d := range []*Daemon{b, cc} {
		took := eventually(t, 3*time.Second, "a deleted entry no longer served", func() bool {
			return bytes.Equal(d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", tok).Expect(t, 200).Body, v2)
		})
		t.Logf("entry deletion seen on %s after %v", d.Proxy, took)
	}

	// A token revoked on A: 401 on B and C.
	a.Do("DELETE", fmt.Sprintf("/personal_access_tokens/%d", tokID), rootToken, nil).Expect(t, 204)
	for _, d := range []*Daemon{b, cc} {
		took := eventually(t, 3*time.Second, "a revoked token refused", func() bool {
			return d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", tok).Status == 401
		})
		t.Logf("revocation seen on %s after %v", d.Proxy, took)
	}
}

// TestClusterKillMidFill: node A is killed (SIGKILL) while it fills a file;
// another node then serves the whole file (A's lease died with it), nothing
// partial is ever served, and nothing of A's fill is left in the bucket.
func TestClusterKillMidFill(t *testing.T) {
	c := startCluster(t, 2, nil)
	a, b := c.nodes[0], c.nodes[1]
	f := a.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("kill", 2<<20)
	up.set(pxJar, pxFile{body: body, hold: true})
	f.Upstream(reg, up.URL, nil)

	req, _ := http.NewRequest(http.MethodGet, a.pxURL(reg, pxJar), nil)
	req.Header.Set("PRIVATE-TOKEN", rootToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-up.midBody
	if _, err := io.ReadFull(res.Body, make([]byte, 1)); err != nil {
		t.Fatalf("first byte: %v", err)
	}
	a.Kill()
	if n, err := pxDrain(res.Body); err == nil {
		t.Fatalf("the body of a killed fill ended cleanly after %d more bytes", n)
	}
	res.Body.Close()

	up.set(pxJar, pxFile{body: body})
	got := b.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if !bytes.Equal(got.Body, body) {
		t.Fatalf("B after A died: %d bytes, want %d", len(got.Body), len(body))
	}
	b.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	if n := up.calls(pxJar); n != 2 {
		t.Fatalf("upstream GETs = %d, want 2 (A's cut fill, B's)", n)
	}
	// A restarted on its data dir serves the whole file too, from the bucket.
	a.start()
	if got := a.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200); !bytes.Equal(got.Body, body) {
		t.Fatalf("A after its restart: %d bytes", len(got.Body))
	}
	if n := up.calls(pxJar); n != 2 {
		t.Fatalf("upstream GETs = %d after A's restart, want 2", n)
	}
}

// loadResult counts what a load generator saw.
type loadResult struct {
	ok, failed, wrong atomic.Int64
	reasons           sync.Map // failure bodies seen
}

// runLoad requests the hot files (cached) and fresh files (misses) on every
// node until stop closes; a 200 must carry the exact body, anything else
// must be a 5xx with a reason in its body.
func runLoad(t *testing.T, c *cluster, reg int64, up *pxUpstream, hot map[string][]byte, tokens []string, stop chan struct{}) (*loadResult, *sync.WaitGroup) {
	r := &loadResult{}
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			d := c.nodes[w%len(c.nodes)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path, want := "", []byte(nil)
				if i%4 == 3 {
					n := seq.Add(1)
					path = fmt.Sprintf("org/example/fresh/%d/fresh-%d.jar", n, n)
					want = pxBody(path, 8<<10)
					up.set(path, pxFile{body: want})
				} else {
					for p, b := range hot {
						if len(p)%3 == i%3 || want == nil {
							path, want = p, b
						}
					}
				}
				req, _ := http.NewRequest(http.MethodGet, d.pxURL(reg, path), nil)
				req.Header.Set("PRIVATE-TOKEN", tokens[i%len(tokens)])
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					r.wrong.Add(1)
					r.reasons.Store("transport: "+err.Error(), true)
					continue
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				switch {
				case res.StatusCode == 200 && err == nil && bytes.Equal(got, want):
					r.ok.Add(1)
				case res.StatusCode >= 500 && len(bytes.TrimSpace(got)) > 0:
					r.failed.Add(1)
					r.reasons.Store(fmt.Sprintf("%d %s", res.StatusCode, got), true)
				default:
					r.wrong.Add(1)
					r.reasons.Store(fmt.Sprintf("WRONG %d (%d bytes, err %v): %.200s", res.StatusCode, len(got), err, got), true)
				}
			}
		}(w)
	}
	return r, &wg
}

// TestClusterServicesRestart: PostgreSQL and then the S3 server are
// restarted under load. While one is away requests fail cleanly (a 5xx with
// a reason) or are served from what the nodes hold; no answer is ever a
// wrong or partial body; afterwards the nodes recover by themselves.
func TestClusterServicesRestart(t *testing.T) {
	c := startCluster(t, 2, nil)
	f := c.nodes[0].Fix(t)
	group := f.Group("acme", 0, "private")
	reg := f.Registry(group, "main")
	up := newPxUpstream(t)
	f.Upstream(reg, up.URL, nil)
	// A member's access is a decision read from the index (root's is not):
	// while PostgreSQL is away it must never turn into a 404 or 403.
	uid, member := f.User("dev", false, "read_virtual_registry")
	f.Member(group, uid, 30)
	tokens := []string{rootToken, member}
	hot := map[string][]byte{}
	for i := 0; i < 3; i++ {
		p := fmt.Sprintf("org/example/hot/%d/hot-%d.jar", i, i)
		hot[p] = pxBody(p, 100<<10)
		up.set(p, pxFile{body: hot[p]})
		for _, d := range c.nodes {
			d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
			d.pxGet(t, reg, p+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		}
	}
	outage := func(name string, stopSvc, startSvc func()) {
		stop := make(chan struct{})
		r, wg := runLoad(t, c, reg, up, hot, tokens, stop)
		eventually(t, 30*time.Second, name+": load running", func() bool { return r.ok.Load() >= 20 })
		stopSvc()
		before := r.ok.Load() + r.failed.Load()
		eventually(t, 60*time.Second, name+": requests answered during the outage", func() bool {
			return r.ok.Load()+r.failed.Load()-before >= 40
		})
		startSvc()
		// Recovered: a fresh miss succeeds on every node.
		for i, d := range c.nodes {
			p := fmt.Sprintf("org/example/after-%s/%d/after-%d.jar", name, i, i)
			want := pxBody(p, 4<<10)
			up.set(p, pxFile{body: want})
			eventually(t, 60*time.Second, name+": node recovered", func() bool {
				res := d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken)
				return res.Status == 200 && bytes.Equal(res.Body, want)
			})
		}
		close(stop)
		wg.Wait()
		reasons := []string{}
		r.reasons.Range(func(k, _ any) bool { reasons = append(reasons, k.(string)); return len(reasons) < 10 })
		t.Logf("%s: %d ok, %d failed cleanly, %d wrong; some failures: %q", name, r.ok.Load(), r.failed.Load(), r.wrong.Load(), reasons)
		if r.wrong.Load() > 0 {
			t.Fatalf("%s: %d wrong answers: %q", name, r.wrong.Load(), reasons)
		}
		for p, want := range hot {
			for _, d := range c.nodes {
				if got := d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200).Body; !bytes.Equal(got, want) {
					t.Fatalf("%s: %s after the outage: %d bytes", name, p, len(got))
				}
			}
		}
	}
	outage("postgres", c.pg.Stop, func() { c.pg.Start(t) })
	outage("s3", c.s3.Stop, c.s3.Start)
	for _, d := range c.nodes {
		if res := d.Do("GET", "/-/readiness", "", nil); res.Status != 200 {
			t.Fatalf("readiness after recovery: %d %s", res.Status, res.Body)
		}
	}
}

// TestClusterMigrate moves a single node (bbolt, blobs on disk) into a
// cluster with `registryd migrate`: refused with another key, verified,
// idempotent when run again, and the cluster then serves the node's cached
// file and accepts its tokens without asking the upstream.
func TestClusterMigrate(t *testing.T) {
	pg, s3 := testsvc.Postgres(t), testsvc.ObjectStore(t)
	env := clusterEnv(t, pg, s3)
	single := Start(t, map[string]string{"REGISTRYD_SECRETS_KEY": env["REGISTRYD_SECRETS_KEY"]})
	f := single.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	body := pxBody("migrate", 300<<10)
	up.set(pxJar, pxFile{body: body})
	f.Upstream(reg, up.URL, nil)
	_, tok := f.User("bob", true, "read_virtual_registry")
	single.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", tok).Expect(t, 200)
	single.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", tok).Expect(t, 200)
	single.Stop()

	migrate := func(override map[string]string) (string, error) {
		cmd := exec.Command(binary, "migrate", "--from", single.DataDir)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "REGISTRYD_DATA_DIR=" + t.TempDir()}
		for k, v := range env {
			if o, ok := override[k]; ok {
				v = o
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	other := make([]byte, 32)
	rand.Read(other)
	if out, err := migrate(map[string]string{"REGISTRYD_SECRETS_KEY": hex.EncodeToString(other)}); err == nil ||
		!strings.Contains(out, "secrets key") {
		t.Fatalf("migrate with another installation's key: err %v\n%s", err, out)
	}
	out, err := migrate(nil)
	if err != nil || !strings.Contains(out, "verified") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	t.Logf("first run:\n%s", out)
	if out, err := migrate(nil); err != nil || !strings.Contains(out, "verified") || !strings.Contains(out, "1 present already") {
		t.Fatalf("migrate again: %v\n%s", err, out)
	}

	c := []*Daemon{Start(t, env), Start(t, env)}
	for _, d := range c {
		if got := d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", tok).Expect(t, 200).Body; !bytes.Equal(got, body) {
			t.Fatalf("the migrated file on a cluster node: %d bytes", len(got))
		}
	}
	if n := up.calls(pxJar); n != 1 {
		t.Fatalf("upstream GETs = %d after the move, want 1 (the single node's fill)", n)
	}
}

// TestClusterMergedMetadata: maven-metadata.xml merged from two upstreams on
// node A is answered on node B from the documents in the bucket: no
// upstream is asked again and no entry is dropped.
func TestClusterMergedMetadata(t *testing.T) {
	c := startCluster(t, 2, nil)
	a, b := c.nodes[0], c.nodes[1]
	f := a.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	const meta = "org/example/lib/maven-metadata.xml"
	doc := func(versions ...string) []byte {
		v := ""
		for _, x := range versions {
			v += "<version>" + x + "</version>"
		}
		return []byte(`<?xml version="1.0" encoding="UTF-8"?><metadata><groupId>org.example</groupId><artifactId>lib</artifactId>` +
			`<versioning><latest>` + versions[len(versions)-1] + `</latest><release>` + versions[len(versions)-1] +
			`</release><versions>` + v + `</versions><lastUpdated>20260101000000</lastUpdated></versioning></metadata>`)
	}
	one, two := newPxUpstream(t), newPxUpstream(t)
	one.set(meta, pxFile{body: doc("1.0", "1.1")})
	two.set(meta, pxFile{body: doc("2.0")})
	ups := []int64{f.Upstream(reg, one.URL, nil), f.Upstream(reg, two.URL, nil)}

	merged := a.pxGet(t, reg, meta, "PRIVATE-TOKEN", rootToken).Expect(t, 200).Body
	for _, v := range []string{"1.0", "1.1", "2.0"} {
		if !bytes.Contains(merged, []byte("<version>"+v+"</version>")) {
			t.Fatalf("merged on A lacks %s:\n%s", v, merged)
		}
	}
	// The documents are stored once the merge answered; wait for both
	// entries, then ask B.
	eventually(t, 10*time.Second, "both documents stored", func() bool {
		for _, id := range ups {
			var es []map[string]any
			a.Do("GET", "/virtual_registries/packages/maven/upstreams/"+itoa(id)+"/cache_entries", rootToken, nil).Expect(t, 200).JSON(t, &es)
			if len(es) != 1 {
				return false
			}
		}
		return true
	})
	calls := one.calls(meta) + two.calls(meta)
	// With the bucket away, B (which holds neither document) answers 503
	// with the reason, and does not hold the outage against the documents:
	// once the bucket is back it merges them.
	c.s3.Stop()
	r := b.pxGet(t, reg, meta, "PRIVATE-TOKEN", rootToken)
	c.s3.Start()
	if r.Status != 503 || !bytes.Contains(r.Body, []byte("object storage not available")) {
		t.Fatalf("B with the bucket away: %d %s", r.Status, r.Body)
	}
	if got := b.pxGet(t, reg, meta, "PRIVATE-TOKEN", rootToken).Expect(t, 200).Body; !bytes.Equal(got, merged) {
		t.Fatalf("B's merge differs from A's:\n%s\n%s", got, merged)
	}
	if n := one.calls(meta) + two.calls(meta); n != calls {
		t.Fatalf("B asked the upstreams %d more times for documents in the bucket", n-calls)
	}
}
