package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"registryd/store"
)

func rulesPath(upstream int64) string { return fmt.Sprintf("%s/upstreams/%d/rules", vrBase, upstream) }

func rulePath(upstream, rule int64) string { return fmt.Sprintf("%s/%d", rulesPath(upstream), rule) }

var ruleKeyOrder = []string{"id", "upstream_id", "group_id", "rule_type", "target_coordinate", "pattern_type",
	"pattern", "created_at", "updated_at"}

// wantBody fails unless the answer is status with exactly body.
func wantBody(t *testing.T, r testResp, status int, body string) {
	t.Helper()
	if r.status != status || strings.TrimSpace(string(r.body)) != body {
		t.Fatalf("answer %d %s\nwant   %d %s", r.status, r.body, status, body)
	}
}

// addRule creates a rule through the store.
func (e *ceEnv) addRule(upstream int64, rtype, target, ptype, pattern string) store.UpstreamRule {
	e.t.Helper()
	r, err := e.st.CreateUpstreamRule(store.UpstreamRule{UpstreamID: upstream, RuleType: rtype,
		TargetCoordinate: target, PatternType: ptype, Pattern: pattern})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *ceEnv) otherUpstream() store.Upstream {
	e.t.Helper()
	pu, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://other.example/maven2", Name: "other"})
	if err != nil {
		e.t.Fatal(err)
	}
	return pu.Upstream
}

func TestRuleCreateDefaults(t *testing.T) {
	e := newUpstreamEnv(t)
	r := e.send(http.MethodPost, rulesPath(e.upstream.ID), "maintainer", `{"pattern":"com.example.*"}`).want(t, 201)
	if got := strings.Join(keysOf(t, r.body), ","); got != strings.Join(ruleKeyOrder, ",") {
		t.Fatalf("keys %s, want %v", got, ruleKeyOrder)
	}
	m := object(t, r)
	want := map[string]any{"upstream_id": float64(e.upstream.ID), "group_id": float64(e.group.ID),
		"rule_type": "allow", "target_coordinate": "group_id", "pattern_type": "wildcard", "pattern": "com.example.*",
		"created_at": "2026-11-21T10:04:05.123Z", "updated_at": "2026-11-21T10:04:05.123Z"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
	id := int64(m["id"].(float64))
	stored, err := e.st.UpstreamRule(id)
	if err != nil || stored.Pattern != "com.example.*" || stored.RuleType != "allow" {
		t.Fatalf("stored %+v, %v", stored, err)
	}

	// Every field given, as a form body.
	req := httptest.NewRequest(http.MethodPost, rulesPath(e.upstream.ID),
		strings.NewReader("rule_type=deny&target_coordinate=version&pattern_type=regex&pattern=-SNAPSHOT%24"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("PRIVATE-TOKEN", e.tokens["owner"])
	m = object(t, serve(e.srv, req).want(t, 201))
	if m["rule_type"] != "deny" || m["target_coordinate"] != "version" || m["pattern_type"] != "regex" || m["pattern"] != "-SNAPSHOT$" {
		t.Fatalf("created %v", m)
	}

	// Get and list show the same resource, the list in id order.
	got := object(t, e.do(http.MethodGet, rulePath(e.upstream.ID, id), "guest").want(t, 200))
	if got["id"] != float64(id) || got["pattern"] != "com.example.*" {
		t.Fatalf("get %v", got)
	}
	list := e.do(http.MethodGet, rulesPath(e.upstream.ID), "guest").want(t, 200).list(t)
	if len(list) != 2 || list[0]["id"] != float64(id) || list[1]["pattern"] != "-SNAPSHOT$" {
		t.Fatalf("list %v", list)
	}
	// No rules: an empty array.
	other := e.otherUpstream()
	wantBody(t, e.do(http.MethodGet, rulesPath(other.ID), "guest"), 200, "[]")
}

func TestRuleCreateErrors(t *testing.T) {
	e := newUpstreamEnv(t)
	path := rulesPath(e.upstream.ID)
	tests := []struct {
		name, body string
		status     int
		want       string
	}{
		{"no pattern", `{}`, 400, `{"error":"pattern is missing"}`},
		{"empty pattern", `{"pattern":" "}`, 400, `{"error":"pattern is empty"}`},
		{"unknown rule_type", `{"pattern":"x","rule_type":"block"}`, 400, `{"error":"rule_type does not have a valid value"}`},
		{"unknown target", `{"pattern":"x","target_coordinate":"classifier"}`, 400,
			`{"error":"target_coordinate does not have a valid value"}`},
		{"unknown pattern_type", `{"pattern":"x","pattern_type":"glob"}`, 400, `{"error":"pattern_type does not have a valid value"}`},
		{"enums are case-sensitive", `{"pattern":"x","rule_type":"DENY"}`, 400, `{"error":"rule_type does not have a valid value"}`},
		{"every parameter error at once", `{"rule_type":"x","pattern_type":"y"}`, 400,
			`{"error":"pattern is missing, rule_type does not have a valid value, pattern_type does not have a valid value"}`},
		{"pattern not a string", `{"pattern":["x"]}`, 400, `{"error":"pattern is invalid"}`},
		{"group wildcard", `{"pattern":"com/example"}`, 400,
			`{"message":{"pattern":["should be a valid Maven group ID with optional wildcard characters."]}}`},
		{"artifact wildcard", `{"pattern":"**-app","target_coordinate":"artifact_id"}`, 400,
			`{"message":{"pattern":["should be a valid Maven artifact ID with optional wildcard characters."]}}`},
		{"version wildcard", `{"pattern":"1..0","target_coordinate":"version"}`, 400,
			`{"message":{"pattern":["should be a valid Maven version with optional wildcard characters."]}}`},
		{"regex", `{"pattern":"com[example","pattern_type":"regex"}`, 400,
			"{\"message\":{\"pattern\":[\"not valid RE2 syntax: missing closing ]: `[example`\"]}}"},
		{"too long", `{"pattern":"` + strings.Repeat("a", 256) + `","pattern_type":"regex"}`, 400,
			`{"message":{"pattern":["is too long (maximum is 255 characters)"]}}`},
		{"not JSON", `{"pattern":`, 400, `{"message":"400 Bad request - the request body is not a valid JSON object"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantBody(t, e.send(http.MethodPost, path, "maintainer", tt.body), tt.status, tt.want)
		})
	}
	if rules, _ := e.st.UpstreamRules(e.upstream.ID); len(rules) != 0 {
		t.Fatalf("refused creates stored %v", rules)
	}
}

// A regex whose RE2 program alone is over the budget of an upstream's
// regex rules, or does not fit beside the upstream's other regexes, is
// refused at creation and on update, in GitLab's validation shape, and
// nothing is stored; a rule's own stored version does not count against
// its update, nor do wildcards.
func TestRuleRegexBudget(t *testing.T) {
	e := newUpstreamEnv(t)
	path := rulesPath(e.upstream.ID)
	post := func(pattern string) testResp {
		return e.send(http.MethodPost, path, "maintainer", `{"pattern_type":"regex","rule_type":"deny","pattern":"`+pattern+`"}`)
	}
	wantBody(t, post(`(?:.*){1000}`), 400, `{"message":{"pattern":["is too complex (compiles to 2002 RE2 `+
		`instructions; an upstream's regex rules may compile to 600 together)"]}}`)
	wantBody(t, post(strings.Repeat(`(?:.*){1000}`, 21)), 400, `{"message":{"pattern":["is too complex (compiles to 42002 RE2 `+
		`instructions; an upstream's regex rules may compile to 600 together)"]}}`)
	first := object(t, post(`a{398}`).want(t, 201)) // 400 instructions
	e.send(http.MethodPost, path, "maintainer", `{"pattern":"com.*"}`).want(t, 201)
	over := `{"message":{"pattern":["is too complex (compiles to 300 RE2 instructions and the upstream's other ` +
		`regex rules to 400; they may compile to 600 together)"]}}`
	wantBody(t, post(`a{298}`), 400, over)
	// Another upstream has a budget of its own.
	other := e.otherUpstream()
	e.send(http.MethodPost, rulesPath(other.ID), "maintainer", `{"pattern_type":"regex","pattern":"a{298}"}`).want(t, 201)

	// An update replaces the rule's own program.
	id := int64(first["id"].(float64))
	e.send(http.MethodPatch, rulePath(e.upstream.ID, id), "maintainer", `{"pattern":"a{298}"}`).want(t, 200)
	post(`b{298}`).want(t, 201)
	wildcard := e.addRule(e.upstream.ID, "allow", "version", "wildcard", "1.*")
	wantBody(t, e.send(http.MethodPatch, rulePath(e.upstream.ID, wildcard.ID), "maintainer",
		`{"pattern_type":"regex","pattern":"x"}`), 400, `{"message":{"pattern":["is too complex (compiles to 3 RE2 `+
		`instructions and the upstream's other regex rules to 600; they may compile to 600 together)"]}}`)
	rules, err := e.st.UpstreamRules(e.upstream.ID)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, r := range rules {
		patterns = append(patterns, r.Pattern)
	}
	if got := strings.Join(patterns, " "); got != "a{298} com.* b{298} 1.*" {
		t.Fatalf("stored patterns %s", got)
	}
}

func TestRuleDuplicatesAndLimit(t *testing.T) {
	e := newUpstreamEnv(t)
	path := rulesPath(e.upstream.ID)
	e.send(http.MethodPost, path, "maintainer", `{"pattern":"com.*","rule_type":"deny"}`).want(t, 201)
	wantBody(t, e.send(http.MethodPost, path, "maintainer", `{"pattern":"com.*","rule_type":"deny"}`),
		400, `{"message":{"pattern":["has already been taken"]}}`)
	// The same pattern as an allow rule, or on another upstream, is another rule.
	e.send(http.MethodPost, path, "maintainer", `{"pattern":"com.*"}`).want(t, 201)
	other := e.otherUpstream()
	e.send(http.MethodPost, rulesPath(other.ID), "maintainer", `{"pattern":"com.*","rule_type":"deny"}`).want(t, 201)

	for i := 2; i < store.MaxRulesPerUpstream; i++ {
		e.send(http.MethodPost, path, "maintainer", fmt.Sprintf(`{"pattern":"g%d"}`, i)).want(t, 201)
	}
	wantBody(t, e.send(http.MethodPost, path, "maintainer", `{"pattern":"one.more"}`),
		400, `{"message":{"base":["Maximum of 20 rules per upstream has been reached"]}}`)
	if n := len(e.do(http.MethodGet, path, "guest").want(t, 200).list(t)); n != 20 {
		t.Fatalf("%d rules listed", n)
	}
}

func TestRuleUpdate(t *testing.T) {
	e := newUpstreamEnv(t)
	rule := e.addRule(e.upstream.ID, "allow", "group_id", "wildcard", "com.*")
	taken := e.addRule(e.upstream.ID, "deny", "group_id", "wildcard", "org.*")
	path := rulePath(e.upstream.ID, rule.ID)
	tests := []struct {
		name, body string
		status     int
		want       string // the exact error body
	}{
		{"nothing", `{}`, 400,
			`{"error":"pattern, pattern_type, rule_type, target_coordinate are missing, at least one parameter must be provided"}`},
		{"empty pattern", `{"pattern":""}`, 400, `{"error":"pattern is empty"}`},
		{"unknown rule_type", `{"rule_type":"maybe"}`, 400, `{"error":"rule_type does not have a valid value"}`},
		// The merged rule is validated: com.* is a fine wildcard but not a
		// version, and "*" no regex.
		{"target makes the pattern invalid", `{"target_coordinate":"artifact_id","pattern":"com/x"}`, 400,
			`{"message":{"pattern":["should be a valid Maven artifact ID with optional wildcard characters."]}}`},
		{"regex *", `{"pattern_type":"regex","pattern":"*"}`, 400,
			"{\"message\":{\"pattern\":[\"not valid RE2 syntax: missing argument to repetition operator: `*`\"]}}"},
		{"duplicate", `{"rule_type":"deny","pattern":"org.*"}`, 400, `{"message":{"pattern":["has already been taken"]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantBody(t, e.send(http.MethodPatch, path, "maintainer", tt.body), tt.status, tt.want)
			if got, _ := e.st.UpstreamRule(rule.ID); got != rule {
				t.Fatalf("a refused PATCH changed the rule: %+v", got)
			}
		})
	}

	e.clock.Advance(1500e6)
	m := object(t, e.send(http.MethodPatch, path, "maintainer", `{"pattern_type":"regex","pattern":"^com\\."}`).want(t, 200))
	if m["pattern_type"] != "regex" || m["pattern"] != `^com\.` || m["rule_type"] != "allow" ||
		m["created_at"] != "2026-11-21T10:04:05.123Z" || m["updated_at"] != "2026-11-21T10:04:06.623Z" {
		t.Fatalf("patched %v", m)
	}
	m = object(t, e.send(http.MethodPatch, path, "owner", `{"rule_type":"deny","target_coordinate":"version"}`).want(t, 200))
	if m["rule_type"] != "deny" || m["target_coordinate"] != "version" || m["pattern"] != `^com\.` {
		t.Fatalf("patched %v", m)
	}
	if got, _ := e.st.UpstreamRule(taken.ID); got != taken {
		t.Fatalf("the other rule changed: %+v", got)
	}
}

func TestRuleDelete(t *testing.T) {
	e := newUpstreamEnv(t)
	a := e.addRule(e.upstream.ID, "allow", "group_id", "wildcard", "a")
	b := e.addRule(e.upstream.ID, "allow", "group_id", "wildcard", "b")
	r := e.do(http.MethodDelete, rulePath(e.upstream.ID, a.ID), "maintainer").want(t, 204)
	if len(r.body) != 0 {
		t.Fatalf("204 with a body: %s", r.body)
	}
	wantBody(t, e.do(http.MethodGet, rulePath(e.upstream.ID, a.ID), "maintainer"), 404, `{"message":"404 Not found"}`)
	wantBody(t, e.do(http.MethodDelete, rulePath(e.upstream.ID, a.ID), "maintainer"), 404, `{"message":"404 Not found"}`)
	list := e.do(http.MethodGet, rulesPath(e.upstream.ID), "guest").want(t, 200).list(t)
	if len(list) != 1 || list[0]["id"] != float64(b.ID) {
		t.Fatalf("list %v", list)
	}
}

// TestRuleOfAnotherUpstream: a rule is only reachable under its own
// upstream, also for a caller who may manage both.
func TestRuleOfAnotherUpstream(t *testing.T) {
	e := newUpstreamEnv(t)
	other := e.otherUpstream()
	rule := e.addRule(other.ID, "deny", "group_id", "wildcard", "com.*")
	wrong := rulePath(e.upstream.ID, rule.ID)
	for _, method := range []string{http.MethodGet, http.MethodPatch, http.MethodDelete} {
		wantBody(t, e.send(method, wrong, "root", `{"pattern":"x"}`), 404, `{"message":"404 Not found"}`)
	}
	if got, err := e.st.UpstreamRule(rule.ID); err != nil || got != rule {
		t.Fatalf("the rule changed: %+v, %v", got, err)
	}
	wantBody(t, e.do(http.MethodGet, rulePath(e.upstream.ID, 999), "root"), 404, `{"message":"404 Not found"}`)
	wantBody(t, e.do(http.MethodGet, rulePath(e.upstream.ID, 0)[:len(rulePath(e.upstream.ID, 0))-1]+"abc", "root"),
		400, `{"error":"rule_id is invalid"}`)
	wantBody(t, e.do(http.MethodGet, rulesPath(9999), "root"), 404, `{"message":"404 Upstream Not Found"}`)
	wantBody(t, e.do(http.MethodGet, rulePath(9999, rule.ID), "root"), 404, `{"message":"404 Upstream Not Found"}`)
	wantBody(t, e.do(http.MethodPut, rulePath(other.ID, rule.ID), "root"), 405, `{"error":"405 Not Allowed"}`)
}

func TestRulePermissions(t *testing.T) {
	tests := []struct {
		role         string
		read, manage int // status of list and get; of create, PATCH and DELETE when allowed
	}{
		{"", 401, 401},
		{"deploy", 401, 401},
		{"outsider", 404, 404},
		{"guest", 200, 403},
		{"reporter", 200, 403},
		{"developer", 200, 403},
		{"maintainer_read_api", 200, 403},
		{"maintainer", 200, 0},
		{"owner", 200, 0},
		{"root", 200, 0},
	}
	e := newUpstreamEnv(t)
	for i, tt := range tests {
		name := tt.role
		if name == "" {
			name = "anonymous"
		}
		t.Run(name, func(t *testing.T) {
			rule := e.addRule(e.upstream.ID, "deny", "group_id", "wildcard", fmt.Sprint("fixture", i))
			if r := e.do(http.MethodGet, rulesPath(e.upstream.ID), tt.role); r.status != tt.read {
				t.Fatalf("list: %d %s", r.status, r.body)
			}
			if r := e.do(http.MethodGet, rulePath(e.upstream.ID, rule.ID), tt.role); r.status != tt.read {
				t.Fatalf("get: %d %s", r.status, r.body)
			}
			want := func(ok int) int {
				if tt.manage != 0 {
					return tt.manage
				}
				return ok
			}
			send := func(method, path, body string) testResp {
				req := httptest.NewRequest(method, path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				switch tt.role {
				case "":
				case "deploy":
					req.Header.Set("Deploy-Token", e.tokens[tt.role])
				default:
					req.Header.Set("PRIVATE-TOKEN", e.tokens[tt.role])
				}
				return serve(e.srv, req)
			}
			if r := send(http.MethodPost, rulesPath(e.upstream.ID), fmt.Sprintf(`{"pattern":"new%d"}`, i)); r.status != want(201) {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			if r := send(http.MethodPatch, rulePath(e.upstream.ID, rule.ID), `{"rule_type":"allow"}`); r.status != want(200) {
				t.Fatalf("patch: %d %s", r.status, r.body)
			}
			if r := send(http.MethodDelete, rulePath(e.upstream.ID, rule.ID), ""); r.status != want(204) {
				t.Fatalf("delete: %d %s", r.status, r.body)
			}
			_, err := e.st.UpstreamRule(rule.ID)
			if gone := err != nil; gone != (tt.manage == 0) {
				t.Fatalf("rule gone = %v", gone)
			}
		})
		// Keep the upstream below the rule limit.
		rules, _ := e.st.UpstreamRules(e.upstream.ID)
		for _, r := range rules {
			_ = e.st.DeleteUpstreamRule(r.ID)
		}
	}
}

func TestRulesFeatureOff(t *testing.T) {
	e := newCacheEntryEnv(t, func(o *serverOptions) { o.auth.DisableVirtualRegistry = true })
	rule := e.addRule(e.upstream.ID, "deny", "group_id", "wildcard", "com.*")
	for _, r := range []testResp{
		e.do(http.MethodGet, rulesPath(e.upstream.ID), "root"),
		e.do(http.MethodPost, rulesPath(e.upstream.ID), "root"),
		e.do(http.MethodGet, rulePath(e.upstream.ID, rule.ID), "root"),
		e.do(http.MethodDelete, rulePath(e.upstream.ID, rule.ID), ""),
	} {
		wantBody(t, r, 404, `{"message":"404 Not Found"}`)
	}
}

// TestRulesCascade: deleting an upstream deletes its rules; another
// upstream's stay.
func TestRulesCascade(t *testing.T) {
	e := newUpstreamEnv(t)
	other := e.otherUpstream()
	gone := []store.UpstreamRule{
		e.addRule(e.upstream.ID, "deny", "group_id", "wildcard", "com.*"),
		e.addRule(e.upstream.ID, "allow", "version", "regex", `^1\.`),
	}
	kept := e.addRule(other.ID, "deny", "group_id", "wildcard", "com.*")
	e.do(http.MethodDelete, fmt.Sprintf("%s/upstreams/%d", vrBase, e.upstream.ID), "maintainer").want(t, 204)
	wantBody(t, e.do(http.MethodGet, rulesPath(e.upstream.ID), "root"), 404, `{"message":"404 Upstream Not Found"}`)
	for _, r := range gone {
		if _, err := e.st.UpstreamRule(r.ID); err == nil {
			t.Fatalf("rule %d survived its upstream", r.ID)
		}
	}
	list := e.do(http.MethodGet, rulesPath(other.ID), "guest").want(t, 200).list(t)
	if len(list) != 1 || list[0]["id"] != float64(kept.ID) {
		t.Fatalf("the other upstream's rules: %v", list)
	}
}
