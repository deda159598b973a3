package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The attack of issue 20, item 5: a client retries one file that answers
// 502 (a Nexus group with one broken remote does this; Maven tries three
// times). The file's breaker opens on its second failure, so the third try
// is answered from it without asking; the upstream stays healthy, and
// every miss of another file is served.
func TestFailingPathKeepsUpstreamHealthy(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	id := strconv.FormatInt(uid, 10)
	bad := "org/example/broken/1.0/broken-1.0.jar"
	up.set(bad, fakeFile{status: http.StatusBadGateway})
	others := files(90)
	for _, p := range others {
		up.set(p, fakeFile{body: jarBytes(p, 512)})
	}

	for try := 1; try <= 3; try++ {
		r := e.get(bad).expect(t, 502)
		if !strings.Contains(string(r.body), "502 Bad Gateway") {
			t.Fatalf("try %d: body %s", try, r.body)
		}
	}
	for _, p := range others {
		e.get(p).expect(t, 200).expectBody(t, string(jarBytes(p, 512)))
	}
	if n := up.calls(bad); n != 2 {
		t.Fatalf("the failing file was asked %d times, want 2 (its breaker opens on the second failure)", n)
	}
	if n := e.metric("registryd_upstream_skipped_total", "upstream", id, "reason", "failing_path"); n != 1 {
		t.Fatalf("skipped for the failing path %v, want 1", n)
	}
	if n := e.metric("registryd_upstream_failing_paths", "upstream", id); n != 1 {
		t.Fatalf("registryd_upstream_failing_paths %v, want 1", n)
	}
	if st := e.srv.health.Status(uid); st.State != "healthy" || st.FailingPaths != 1 {
		t.Fatalf("health %+v, want healthy with one failing path", st)
	}
	if n := e.metric("registryd_upstream_skipped_total", "upstream", id, "reason", "unhealthy"); n != 0 {
		t.Fatalf("%v misses skipped the upstream as unhealthy", n)
	}

	// Repaired: once its backoff (10s) is over, the file's own trial finds it.
	up.set(bad, fakeFile{body: jarBytes(bad, 512)})
	e.get(bad).expect(t, 502)
	e.clock.Advance(10 * time.Second)
	e.get(bad).expect(t, 200).expectBody(t, string(jarBytes(bad, 512)))
	if n := e.metric("registryd_upstream_failing_paths", "upstream", id); n != 0 {
		t.Fatalf("registryd_upstream_failing_paths %v after the file's trial, want 0", n)
	}
}

// Distinct files failing in a row do say the upstream is broken: the
// third marks it unhealthy, and misses skip it. After the backoff the
// trial is not one of the failing files (a client retrying one would keep
// the upstream out): they are answered from their failure until another
// file's request has been the trial.
func TestDistinctFailingPathsMarkUpstream(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	bad := files(3)
	for _, p := range bad {
		up.set(p, fakeFile{status: http.StatusInternalServerError})
	}
	good := "org/example/good/1.0/good-1.0.jar"
	up.set(good, fakeFile{body: jarBytes(good, 512)})

	for i, p := range bad {
		e.get(p).expect(t, 502)
		if got, want := e.srv.health.Status(uid).State, map[bool]string{true: "unhealthy", false: "healthy"}[i == 2]; got != want {
			t.Fatalf("after %d failing files: %s, want %s", i+1, got, want)
		}
	}
	r := e.get(good).expect(t, 502)
	if !strings.Contains(string(r.body), "unhealthy, not asked until") || up.calls(good) != 0 {
		t.Fatalf("a miss asked an unhealthy upstream (%d calls): %s", up.calls(good), r.body)
	}

	// The backoff is over; the failing files are still not the trial.
	e.clock.Advance(10 * time.Second)
	calls := up.total()
	for _, p := range bad {
		r := e.get(p).expect(t, 502)
		if !strings.Contains(string(r.body), "waiting for a trial request for another file") {
			t.Fatalf("%s: %s", p, r.body)
		}
	}
	if up.total() != calls {
		t.Fatal("a failing file was sent as the trial")
	}
	if st := e.srv.health.Status(uid); st.State != "unhealthy" {
		t.Fatalf("health %+v", st)
	}
	// Another file is the trial, and the upstream is back.
	e.get(good).expect(t, 200).expectBody(t, string(jarBytes(good, 512)))
	if st := e.srv.health.Status(uid); st.State != "healthy" {
		t.Fatalf("after the trial: %+v", st)
	}
	// The failing files (each failed once) are asked again.
	up.set(bad[0], fakeFile{body: jarBytes(bad[0], 512)})
	e.get(bad[0]).expect(t, 200)
}

// A redirect refused by policy (here to a URL that is not http(s); a
// redirect to a blocked address is refused alike) is no health failure:
// however many files are refused, the upstream stays healthy and no file's
// breaker opens. The refusal is remembered for a minute, so a client's
// retry does not ask again at once.
func TestBlockedRedirectIsNoHealthFailure(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	redirect := fakeFile{custom: func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://files.example"+r.URL.Path, http.StatusFound)
	}}
	paths := files(5)
	for _, p := range paths {
		up.set(p, redirect)
	}
	for _, p := range paths {
		r := e.get(p).expect(t, 502)
		if !strings.Contains(string(r.body), "Redirected to a URL that is not http(s)") {
			t.Fatalf("%s: %s", p, r.body)
		}
	}
	st := e.srv.health.Status(uid)
	if st.State != "healthy" || st.Failures != 0 || st.LastError != "" || st.FailingPaths != 0 {
		t.Fatalf("health %+v after refused redirects", st)
	}
	if n := e.metric("registryd_upstream_refusals_total", "reason", "blocked"); n != 5 {
		t.Fatalf("refusals{blocked} %v, want 5", n)
	}
	e.get(paths[0]).expect(t, 502)
	if n := up.calls(paths[0]); n != 1 {
		t.Fatalf("a refused redirect was asked again at once: %d calls", n)
	}
}
