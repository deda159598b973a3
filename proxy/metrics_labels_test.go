package proxy

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// Nothing a client sends becomes a label value: requests with invented
// methods, for registries that do not exist, with random paths, add at most
// a few series (route and status code), however many come.
func TestProxyMetricSeriesBounded(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	e.upstream(up.URL, nil, nil)
	count := func() int {
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	before := count()
	rnd := rand.New(rand.NewPCG(3, 4))
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rnd.IntN(len(letters))]
		}
		return string(b)
	}
	const n = 400
	for i := range n {
		method := word(3 + rnd.IntN(8))
		id := strconv.Itoa(1000 + rnd.IntN(1<<20)) // no such registry
		path := "/" + id + "/com/" + word(6) + "/a/1/a-1.jar"
		if i%2 == 0 {
			method = "GET"
		}
		if i%5 == 0 {
			path = "/" + strconv.Itoa(int(e.registry)) + "/" + word(5) + "/x/1/x-1.jar"
		}
		e.do(method, path, nil, "Private-Token", rootToken)
	}
	if grown := count() - before; grown > 12 {
		t.Fatalf("%d more series after %d requests with random methods, registries and paths", grown, n)
	}
}
