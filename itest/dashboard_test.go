package itest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// dashboardPath is the Grafana dashboard shipped in docs/.
const dashboardPath = "../docs/grafana-dashboard.json"

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	// Panels are those of a collapsed row.
	Panels []dashPanel `json:"panels"`
}

type dashVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
}

type dashInput struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	PluginID string `json:"pluginId"`
}

type dashboard struct {
	Inputs        []dashInput `json:"__inputs"`
	SchemaVersion int         `json:"schemaVersion"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []dashVar `json:"list"`
	} `json:"templating"`
}

// dashExpr is one PromQL expression of the dashboard and where it is.
type dashExpr struct {
	where string
	expr  string
	// panel is false for a templating query (Grafana's label_values(), not
	// PromQL).
	panel bool
}

// TestDashboard checks docs/grafana-dashboard.json: it is an importable
// dashboard (a DS_PROMETHEUS input, the registry and upstream variables,
// unique panel ids), every expression is well formed, counters are read
// through rate() or increase() over $__rate_interval, and every metric
// family it names is one a running registryd exports once a registry, an
// upstream and a few downloads exist.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardPath, err)
	}
	exprs := dashboardChecks(t, &dash)

	// The labelled families exist once they have a series: a miss (upstream
	// requests, their duration), a hit (saved requests, served bytes), a
	// file the upstream does not have, asked twice (skipped, negative
	// cache), and an empty body for a jar (a refusal).
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	up.set(pxJar, pxFile{body: pxBody("lib", 4<<10), etag: `"v1"`})
	const emptyJar = "org/example/empty/1.0/empty-1.0.jar"
	up.set(emptyJar, pxFile{body: []byte{}})
	f.Upstream(reg, up.URL, nil)
	tok := []string{"PRIVATE-TOKEN", rootToken}
	d.pxGet(t, reg, pxJar, tok...).Expect(t, 200)
	// The sidecar answers from the stored entry, so the next GET is a hit.
	d.pxGet(t, reg, pxJar+".sha1", tok...).Expect(t, 200)
	d.pxGet(t, reg, pxJar, tok...).Expect(t, 200)
	if r := d.pxGet(t, reg, emptyJar, tok...); r.Status < 500 {
		t.Fatalf("an empty jar answered %d, want a 5xx", r.Status)
	}

	// Families the exposition must declare: all the dashboard names except
	// the pending ones. Asking for the absent file again until the negative
	// cache answers is the only wait: the polling needs no knowledge of
	// when the 404 is remembered.
	names := map[string][]string{} // metric name -> where
	for _, e := range exprs {
		for _, n := range metricNames(e.expr) {
			names[n] = append(names[n], e.where)
		}
	}
	var types map[string]string
	var missing []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		d.pxGet(t, reg, "org/example/absent/1.0/absent-1.0.jar", tok...).Expect(t, 404)
		types = exposedTypes(d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body)
		missing = missing[:0]
		for n := range names {
			if _, ok := metricFamily(types, n); !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // pacing of the poll, not synchronisation
	}
	sort.Strings(missing)
	for _, n := range missing {
		t.Errorf("the dashboard uses %s (%s), which /metrics does not declare", n, strings.Join(names[n], "; "))
	}

	// Counters and histograms only through rate() or increase() over
	// $__rate_interval; gauges never through them.
	for _, e := range exprs {
		for _, n := range metricNames(e.expr) {
			typ := ""
			if fam, ok := metricFamily(types, n); ok {
				typ = types[fam]
			}
			wrapped := regexp.MustCompile(`(?:^|[^\w:])(rate|irate|increase)\(\s*` + regexp.QuoteMeta(n) +
				`\b(\{[^}]*\})?(\[[^\]]*\])?`)
			all := regexp.MustCompile(`(?:^|[^\w:])` + regexp.QuoteMeta(n) + `\b`)
			ws := wrapped.FindAllStringSubmatch(e.expr, -1)
			switch typ {
			case "counter", "histogram", "summary":
				if len(ws) != len(all.FindAllString(e.expr, -1)) {
					t.Errorf("%s: counter %s outside rate()/increase(): %s", e.where, n, e.expr)
				}
				for _, w := range ws {
					if (w[1] != "rate" && w[1] != "increase") || w[3] != "[$__rate_interval]" {
						t.Errorf("%s: %s read as %s(...%s), want rate or increase over [$__rate_interval]: %s",
							e.where, n, w[1], w[3], e.expr)
					}
				}
			case "gauge", "untyped":
				if len(ws) != 0 {
					t.Errorf("%s: gauge %s inside %s(): %s", e.where, n, ws[0][1], e.expr)
				}
			}
		}
	}

	// Families the exposition has and the dashboard does not show, as a hint.
	var unused []string
	for fam := range types {
		if !strings.HasPrefix(fam, "registryd_") {
			continue
		}
		used := false
		for n := range names {
			if f, ok := metricFamily(types, n); ok && f == fam {
				used = true
				break
			}
		}
		if !used {
			unused = append(unused, fam)
		}
	}
	sort.Strings(unused)
	t.Logf("registryd families not on the dashboard: %v", unused)

	promtoolCheckExprs(t, &dash, exprs)
}

// dashboardChecks checks the dashboard's structure and the form of its
// expressions, and returns them.
func dashboardChecks(t *testing.T, dash *dashboard) []dashExpr {
	t.Helper()
	if !slices.ContainsFunc(dash.Inputs, func(in dashInput) bool {
		return in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus"
	}) {
		t.Errorf("__inputs lacks the DS_PROMETHEUS datasource input: %+v", dash.Inputs)
	}
	if dash.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want a Grafana 10/11 one", dash.SchemaVersion)
	}

	var exprs []dashExpr
	vars := map[string]dashVar{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v
		if v.Type != "query" {
			continue
		}
		// A query is a string, or an object with a query string in newer
		// exports.
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		exprs = append(exprs, dashExpr{where: "variable " + v.Name, expr: q})
	}
	for _, name := range []string{"registry", "upstream"} {
		v, ok := vars[name]
		if !ok {
			t.Errorf("templating.list lacks the %s variable", name)
			continue
		}
		if v.Type != "query" || !v.Multi || !v.IncludeAll {
			t.Errorf("variable %s: type %q multi %v includeAll %v, want a multi-value query with All",
				name, v.Type, v.Multi, v.IncludeAll)
		}
	}

	ids := map[int]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if p.ID == 0 {
				t.Errorf("%s has no id", where)
			} else if prev, dup := ids[p.ID]; dup {
				t.Errorf("%s: id also used by %q", where, prev)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("%s: datasource %+v, want the DS_PROMETHEUS input", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s has no query", where)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: query %s has no expr", where, tg.RefID)
				}
				exprs = append(exprs, dashExpr{where: where + " " + tg.RefID, expr: tg.Expr, panel: true})
			}
		}
	}
	walk(dash.Panels)

	for _, e := range exprs {
		if err := balanced(e.expr); err != nil {
			t.Errorf("%s: %v: %s", e.where, err, e.expr)
		}
		if len(metricNames(e.expr)) == 0 && !strings.HasPrefix(e.expr, "vector(") {
			t.Errorf("%s names no registryd metric: %s", e.where, e.expr)
		}
		// Every $variable is one the dashboard defines or a Grafana builtin.
		for _, m := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(e.expr, -1) {
			if _, ok := vars[m[1]]; !ok && !strings.HasPrefix(m[1], "__") {
				t.Errorf("%s: undefined variable $%s: %s", e.where, m[1], e.expr)
			}
		}
	}
	return exprs
}

// balanced reports the first unbalanced bracket of a PromQL expression,
// outside its string literals.
func balanced(expr string) error {
	var stack []byte
	pair := map[byte]byte{')': '(', ']': '[', '}': '{'}
	for i := 0; i < len(expr); i++ {
		switch c := expr[i]; c {
		case '"', '\'', '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return fmt.Errorf("unterminated string at %d", i)
			}
			i = j
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pair[c] {
				return fmt.Errorf("unbalanced %q at %d", c, i)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		return fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return nil
}

var metricNameRE = regexp.MustCompile(`(?:^|[^\w:"])(registryd_[a-zA-Z0-9_:]*)`)

// metricNames are the registryd metric names an expression selects, in
// order, each once.
func metricNames(expr string) []string {
	var out []string
	for _, m := range metricNameRE.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// exposedTypes maps each family of a text exposition to its # TYPE.
func exposedTypes(exposition []byte) map[string]string {
	types := map[string]string{}
	for _, line := range strings.Split(string(exposition), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	return types
}

// metricFamily is the family a metric name belongs to: itself, or the
// histogram or summary whose _bucket, _sum or _count series it is.
func metricFamily(types map[string]string, name string) (string, bool) {
	if _, ok := types[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if typ := types[base]; typ == "histogram" || (typ == "summary" && suffix != "_bucket") {
			return base, true
		}
	}
	return "", false
}

// promtoolCheckExprs parses the panel expressions with promtool, when it is
// installed, as recording rules: Grafana's variables are replaced by values
// they can take (a range for $__rate_interval, the all-value .* for a
// multi-value variable, the default of a constant).
func promtoolCheckExprs(t *testing.T, dash *dashboard, exprs []dashExpr) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (apt-get install prometheus): skipping promtool check rules")
		return
	}
	values := map[string]string{}
	for _, v := range dash.Templating.List {
		values[v.Name] = ".*"
		if v.Type == "constant" {
			values[v.Name] = "20"
		}
	}
	varRE := regexp.MustCompile(`\$\{?(\w+)\}?`)
	var b strings.Builder
	b.WriteString("groups:\n- name: dashboard\n  rules:\n")
	n := 0
	for _, e := range exprs {
		if !e.panel {
			continue
		}
		expr := varRE.ReplaceAllStringFunc(e.expr, func(s string) string {
			name := varRE.FindStringSubmatch(s)[1]
			if strings.HasPrefix(name, "__") {
				return "5m"
			}
			return values[name]
		})
		q, _ := json.Marshal(expr) // a JSON string is a YAML string
		fmt.Fprintf(&b, "  # %s\n  - record: dashboard:expr_%d\n    expr: %s\n", e.where, n, q)
		n++
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(path, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, b.String())
	}
}
