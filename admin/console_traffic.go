package admin

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"registryd/internal/chart"
	"registryd/store"
)

// The console's traffic charts: requests, hit ratio, bytes served and
// upstream traffic saved of a registry, requests, hit ratio and requests
// sent of an upstream, over the last hour, day or 30 days. The numbers are
// the traffic history the index keeps (store.Traffic, recorded by
// internal/history every admin.traffic_history_interval); a page shows them
// only after its API calls showed that the token may read the registry or
// upstream.

// trafficRange is a time range the charts offer.
type trafficRange struct {
	Name  string // the query value
	Label string // what the link says
	span  time.Duration
	step  time.Duration
	// axis formats the times under a chart, stepName names a step.
	axis, stepName string
}

var trafficRanges = []trafficRange{
	{"1h", "Last hour", time.Hour, time.Minute, "15:04", "minute"},
	{"24h", "Last 24 hours", 24 * time.Hour, 15 * time.Minute, "15:04", "15 minutes"},
	{"30d", "Last 30 days", 30 * 24 * time.Hour, 6 * time.Hour, "Jan 2", "6 hours"},
}

// trafficRangeOf is the request's ?range=, the last 24 hours by default.
func trafficRangeOf(r *http.Request) trafficRange {
	q := r.URL.Query().Get("range")
	for _, tr := range trafficRanges {
		if tr.Name == q {
			return tr
		}
	}
	return trafficRanges[1]
}

// trafficLink is one choice of the range selector.
type trafficLink struct {
	Label, Href string
	Current     bool
}

// trafficChart is one picture with its legend.
type trafficChart struct {
	Title  string
	SVG    template.HTML
	Legend []trafficLegend
}

type trafficLegend struct {
	Name string
	// Key is the CSS class of its swatch: k0 (light, solid) or k1 (dark,
	// dashed).
	Key string
}

// trafficRow is one step of the table of numbers.
type trafficRow struct {
	Time  string
	Cells []string
}

// consoleTraffic is a page's traffic block.
type consoleTraffic struct {
	Heading  string
	Range    trafficRange
	Links    []trafficLink
	Summary  string
	Charts   []trafficChart
	Columns  []string
	Rows     []trafficRow
	StepName string
}

// trafficSummary is the one line of an upstream on the registry page.
type trafficSummary struct {
	Text string
}

// trafficWindow is the range's steps ending with the one in progress.
func (c *console) trafficWindow(tr trafficRange) (from, to time.Time) {
	to = c.now().UTC().Truncate(tr.step).Add(tr.step)
	return to.Add(-tr.span), to
}

// traffic reads the series of of over the request's range; the caller
// builds the picture.
func (c *console) traffic(r *http.Request, of ...store.TrafficOf) (trafficRange, time.Time, [][]store.TrafficCounts, error) {
	tr := trafficRangeOf(r)
	from, to := c.trafficWindow(tr)
	got, err := c.s.st.Traffic(from, to, tr.step, of...)
	return tr, from, got, err
}

func trafficLinks(base string, cur trafficRange) []trafficLink {
	out := make([]trafficLink, len(trafficRanges))
	for i, tr := range trafficRanges {
		out[i] = trafficLink{Label: tr.Label, Href: base + "?range=" + tr.Name, Current: tr.Name == cur.Name}
	}
	return out
}

func sumTraffic(steps []store.TrafficCounts) store.TrafficCounts {
	var t store.TrafficCounts
	for _, s := range steps {
		t.Add(s)
	}
	return t
}

// ratio is hits of requests in percent, "—" without requests.
func ratio(hits, requests int64) string {
	if requests == 0 {
		return "—"
	}
	return strconv.FormatFloat(float64(hits)*100/float64(requests), 'f', 1, 64) + "%"
}

// countLabel writes a count for an axis: 950, 1.2k, 3.4M.
func countLabel(v float64) string {
	switch {
	case v >= 1e9:
		return trimZero(v/1e9) + "G"
	case v >= 1e6:
		return trimZero(v/1e6) + "M"
	case v >= 1e3:
		return trimZero(v/1e3) + "k"
	}
	return trimZero(v)
}

func trimZero(v float64) string {
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0")
}

func bytesLabel(v float64) string { return sizeOf(int64(v)) }

// sizeOf writes bytes as the pages do: 512 B, 1.5 KiB, 3.0 GiB.
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// count writes "1 request", "3 requests".
func count(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}

func percentLabel(v float64) string { return trimZero(v) + "%" }

// column picks one count of each step.
func column(steps []store.TrafficCounts, f func(store.TrafficCounts) int64) []float64 {
	out := make([]float64, len(steps))
	for i, s := range steps {
		out[i] = float64(f(s))
	}
	return out
}

func hitRatios(steps []store.TrafficCounts) []float64 {
	out := make([]float64, len(steps))
	for i, s := range steps {
		out[i] = math.NaN()
		if s.Requests > 0 {
			out[i] = float64(s.Hits) * 100 / float64(s.Requests)
		}
	}
	return out
}

func peak(vs []float64) float64 {
	m := 0.0
	for _, v := range vs {
		if !math.IsNaN(v) && v > m {
			m = v
		}
	}
	return m
}

// trafficBlock draws a registry's (upstream false) or an upstream's
// charts. id prefixes the charts' element ids; base is the page's path.
func trafficBlock(id, base, what string, upstream bool, tr trafficRange, from time.Time, steps []store.TrafficCounts) consoleTraffic {
	t := sumTraffic(steps)
	per := " per " + tr.stepName + ", " + strings.ToLower(tr.Label)
	mk := func(n, title, desc string, max float64, lines bool, format func(float64) string, series ...chart.Series) trafficChart {
		tc := trafficChart{Title: title, SVG: template.HTML(chart.SVG(chart.Chart{ // chart escapes every text it writes
			ID: id + "-" + n, Title: title + per, Desc: desc, Start: from, Step: tr.step, Series: series,
			Format: format, Max: max, Lines: lines, TimeFormat: tr.axis,
		}))}
		for i, s := range series {
			tc.Legend = append(tc.Legend, trafficLegend{Name: s.Name, Key: "k" + strconv.Itoa(i)})
		}
		return tc
	}
	reqs, hits := column(steps, func(s store.TrafficCounts) int64 { return s.Requests }), column(steps, func(s store.TrafficCounts) int64 { return s.Hits })
	ratios := hitRatios(steps)
	b := consoleTraffic{Heading: "Traffic of " + what, Range: tr, Links: trafficLinks(base, tr), StepName: tr.stepName}
	b.Charts = append(b.Charts,
		mk("requests", "Requests",
			fmt.Sprintf("%s, %d of them answered from the cache; at most %s in one %s.", count(t.Requests, "request"), t.Hits, countLabel(peak(reqs)), tr.stepName),
			0, false, countLabel, chart.Series{Name: "Requests", Values: reqs}, chart.Series{Name: "Answered from the cache (hits)", Values: hits}),
		mk("ratio", "Hit ratio",
			fmt.Sprintf("Hit ratio over the range: %s of requests answered from the cache.", ratio(t.Hits, t.Requests)),
			100, true, percentLabel, chart.Series{Name: "Hit ratio", Values: ratios}),
	)
	served, saved := column(steps, func(s store.TrafficCounts) int64 { return s.ServedBytes }), column(steps, func(s store.TrafficCounts) int64 { return s.SavedBytes })
	b.Charts = append(b.Charts, mk("bytes", "Bytes served",
		fmt.Sprintf("%s served, %s of it from the cache without an upstream download (upstream traffic saved).", sizeOf(t.ServedBytes), sizeOf(t.SavedBytes)),
		0, false, bytesLabel, chart.Series{Name: "Bytes served", Values: served}, chart.Series{Name: "From the cache (upstream traffic saved)", Values: saved}))
	b.Columns = []string{"Requests", "Hits", "Hit ratio", "Bytes served", "Upstream traffic saved"}
	if !upstream {
		b.Summary = fmt.Sprintf("%s: %s, hit ratio %s, %s served, %s of it from the cache (upstream traffic saved).",
			tr.Label, count(t.Requests, "request"), ratio(t.Hits, t.Requests), sizeOf(t.ServedBytes), sizeOf(t.SavedBytes))
	} else {
		sent, failed := column(steps, func(s store.TrafficCounts) int64 { return s.UpstreamRequests }), column(steps, func(s store.TrafficCounts) int64 { return s.UpstreamFailures })
		b.Charts = append(b.Charts, mk("sent", "Requests sent to the upstream",
			fmt.Sprintf("%s sent to the upstream, %d of them failed.", count(t.UpstreamRequests, "request"), t.UpstreamFailures),
			0, false, countLabel, chart.Series{Name: "Sent", Values: sent}, chart.Series{Name: "Failed", Values: failed}))
		b.Columns = append(b.Columns, "Sent upstream", "Failed")
		b.Summary = fmt.Sprintf("%s, through all registries of the upstream: %s, hit ratio %s, %s served, %s of it from the cache (upstream traffic saved), %d sent to the upstream, %d failed.",
			tr.Label, count(t.Requests, "request"), ratio(t.Hits, t.Requests), sizeOf(t.ServedBytes), sizeOf(t.SavedBytes), t.UpstreamRequests, t.UpstreamFailures)
	}
	tf := "2006-01-02 15:04"
	for i, s := range steps {
		if s.IsZero() {
			continue
		}
		row := trafficRow{Time: from.Add(time.Duration(i)*tr.step).Format(tf) + " UTC",
			Cells: []string{strconv.FormatInt(s.Requests, 10), strconv.FormatInt(s.Hits, 10), ratio(s.Hits, s.Requests),
				sizeOf(s.ServedBytes), sizeOf(s.SavedBytes)}}
		if upstream {
			row.Cells = append(row.Cells, strconv.FormatInt(s.UpstreamRequests, 10), strconv.FormatInt(s.UpstreamFailures, 10))
		}
		b.Rows = append(b.Rows, row)
	}
	return b
}

// upstreamLine is an upstream's line on the registry page.
func upstreamLine(tr trafficRange, steps []store.TrafficCounts) trafficSummary {
	t := sumTraffic(steps)
	return trafficSummary{Text: fmt.Sprintf("%s (all its registries): %s, hit ratio %s, %d sent to the upstream, %d failed.",
		tr.Label, count(t.Requests, "request"), ratio(t.Hits, t.Requests), t.UpstreamRequests, t.UpstreamFailures)}
}
