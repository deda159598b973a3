package admin

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"registryd/store"
)

var svgElement = regexp.MustCompile(`(?s)<svg .*?</svg>`)

// TestConsoleTraffic: the registry page and the upstream's page draw the
// traffic history the index keeps, summed over nodes, with their numbers in
// a table, for each time range; a token that may not read the registry
// sees no number of it.
func TestConsoleTraffic(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	e.srv.console.now = e.clock.Now
	reg := store.TrafficOf{Kind: store.TrafficRegistry, ID: e.registry.ID}
	up := store.TrafficOf{Kind: store.TrafficUpstream, ID: e.upstream.ID}
	now := e.clock.Now()
	// Two nodes' points of ten minutes ago, and a point of two days ago
	// (only in the 30 days' hourly points).
	for node, c := range map[uint64]store.TrafficCounts{
		1: {Requests: 30, Hits: 20, Misses: 10, ServedBytes: 3 << 20, SavedBytes: 2 << 20},
		2: {Requests: 10, Hits: 10, ServedBytes: 1 << 20, SavedBytes: 1 << 20},
	} {
		if err := e.st.RecordTraffic(node, store.TrafficSample{At: now.Add(-10 * time.Minute), Series: map[store.TrafficOf]store.TrafficCounts{
			reg: c, up: {Requests: c.Requests, Hits: c.Hits, Misses: c.Misses, ServedBytes: c.ServedBytes, SavedBytes: c.SavedBytes,
				UpstreamRequests: c.Misses, UpstreamFailures: 1},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.RecordTraffic(1, store.TrafficSample{At: now.Add(-48 * time.Hour), Series: map[store.TrafficOf]store.TrafficCounts{
		reg: {Requests: 1000, Hits: 1000, ServedBytes: 1 << 30, SavedBytes: 1 << 30},
	}}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["reporter"])
	regPage := fmt.Sprintf("/-/console/registries/%d", e.registry.ID)

	st, _, body := b.get(regPage)
	wantPage(t, "registry, 24 h", st, body, http.StatusOK,
		"Traffic of registry main",
		`aria-current="page"><strong>Last 24 hours</strong>`,
		"Last 24 hours: 40 requests, hit ratio 75.0%, 4.0 MiB served, 3.0 MiB of it from the cache (upstream traffic saved).",
		"Last 24 hours (all its registries): 40 requests, hit ratio 75.0%, 10 sent to the upstream, 2 failed.",
		"<th scope=\"col\">Bytes served</th>", "<td>40</td><td>30</td><td>75.0%</td><td>4.0 MiB</td><td>3.0 MiB</td>",
		`role="img"`, "Requests per 15 minutes, last 24 hours")
	checkSVGs(t, body, 3)

	st, _, body = b.get(regPage + "?range=1h")
	wantPage(t, "registry, 1 h", st, body, http.StatusOK, `<strong>Last hour</strong>`, "Last hour: 40 requests", "per minute")
	st, _, body = b.get(regPage + "?range=30d")
	wantPage(t, "registry, 30 d", st, body, http.StatusOK, `<strong>Last 30 days</strong>`, "Last 30 days: 1040 requests", "per 6 hours")
	checkSVGs(t, body, 3)
	// An unknown range is the default one.
	st, _, body = b.get(regPage + "?range=1y")
	wantPage(t, "registry, unknown range", st, body, http.StatusOK, `<strong>Last 24 hours</strong>`)

	// The upstream's page: requests, bytes and what was sent to it.
	st, _, body = b.get(fmt.Sprintf("/-/console/upstreams/%d/cache_entries", e.upstream.ID))
	wantPage(t, "upstream", st, body, http.StatusOK, "Traffic of upstream repo",
		"Last 24 hours, through all registries of the upstream: 40 requests, hit ratio 75.0%, 4.0 MiB served, "+
			"3.0 MiB of it from the cache (upstream traffic saved), 10 sent to the upstream, 2 failed.",
		"Requests sent to the upstream", "Bytes served per 15 minutes",
		"<td>40</td><td>30</td><td>75.0%</td><td>4.0 MiB</td><td>3.0 MiB</td><td>10</td><td>2</td>")
	checkSVGs(t, body, 4)

	// No traffic yet: the charts are drawn empty and the table says so.
	e.clock.Advance(3 * time.Hour)
	st, _, body = b.get(regPage + "?range=1h")
	wantPage(t, "registry, quiet hour", st, body, http.StatusOK, "Last hour: 0 requests, hit ratio —", "No traffic recorded in this range.")
	checkSVGs(t, body, 3)

	// An outsider is refused the page, numbers and all.
	out := newBrowser(t, e.srv)
	out.signIn(e.tokens["outsider"])
	st, _, body = out.get(regPage)
	if st == http.StatusOK || strings.Contains(body, "requests") || strings.Contains(body, "<svg") {
		t.Fatalf("an outsider's registry page: %d\n%s", st, body)
	}
}

// checkSVGs wants n charts in body, each well-formed XML.
func checkSVGs(t *testing.T, body string, n int) {
	t.Helper()
	svgs := svgElement.FindAllString(body, -1)
	if len(svgs) != n {
		t.Fatalf("%d charts, want %d", len(svgs), n)
	}
	for _, s := range svgs {
		d := xml.NewDecoder(strings.NewReader(s))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("a chart is not well-formed XML: %v\n%s", err, s)
			}
		}
	}
}
