package store

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store/kv"
)

// ruleEnv is a group with one registry and two upstreams.
func ruleEnv(t *testing.T) (*Store, *testclock.Clock, Registry, Upstream, Upstream) {
	t.Helper()
	s, c := openTest(t)
	g := topGroup(t, s, "acme")
	reg := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	a := up(t, s, reg.ID, "https://a.example/m2")
	b := up(t, s, reg.ID, "https://b.example/m2")
	return s, c, reg, a.Upstream, b.Upstream
}

func newRule(upstream int64, rtype, target, ptype, pattern string) UpstreamRule {
	return UpstreamRule{UpstreamID: upstream, RuleType: rtype, TargetCoordinate: target, PatternType: ptype, Pattern: pattern}
}

func ruleIDs(rules []UpstreamRule) []int64 {
	out := []int64{}
	for _, r := range rules {
		out = append(out, r.ID)
	}
	return out
}

func TestCreateUpstreamRule(t *testing.T) {
	s, c, _, a, b := ruleEnv(t)
	gen := s.CacheGeneration()
	r := ok(s.CreateUpstreamRule(UpstreamRule{ID: 99, GroupID: 12345, UpstreamID: a.ID, RuleType: "deny",
		TargetCoordinate: "group_id", PatternType: "wildcard", Pattern: "com.internal.*"}))(t)
	if r.ID != 1 || r.UpstreamID != a.ID || r.GroupID != a.GroupID || r.Pattern != "com.internal.*" {
		t.Fatalf("rule = %+v", r)
	}
	if want := c.Now().UTC().Truncate(time.Millisecond); !r.CreatedAt.Equal(want) || !r.UpdatedAt.Equal(want) {
		t.Fatalf("timestamps %v/%v, want %v", r.CreatedAt, r.UpdatedAt, want)
	}
	if s.CacheGeneration() == gen {
		t.Fatal("creating a rule did not change the cache generation: the proxy would not reload the registry")
	}
	if got := ok(s.UpstreamRule(r.ID))(t); got != r {
		t.Fatalf("UpstreamRule = %+v, want %+v", got, r)
	}

	// Ids are global and increasing; each upstream lists its own in id order.
	r2 := ok(s.CreateUpstreamRule(newRule(b.ID, "allow", "artifact_id", "wildcard", "x")))(t)
	r3 := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "version", "regex", `^1\.`)))(t)
	if got := ruleIDs(ok(s.UpstreamRules(a.ID))(t)); fmt.Sprint(got) != fmt.Sprint([]int64{r.ID, r3.ID}) {
		t.Fatalf("rules of a: %v", got)
	}
	if got := ruleIDs(ok(s.UpstreamRules(b.ID))(t)); fmt.Sprint(got) != fmt.Sprint([]int64{r2.ID}) {
		t.Fatalf("rules of b: %v", got)
	}

	// Unknown upstream.
	before := snapshot(t, s)
	var nf *NotFoundError
	if _, err := s.CreateUpstreamRule(newRule(999, "allow", "group_id", "wildcard", "x")); !errors.As(err, &nf) || nf.Resource != "Upstream" {
		t.Fatalf("unknown upstream: %v", err)
	}
	if _, err := s.UpstreamRules(999); !errors.As(err, &nf) || nf.Resource != "Upstream" {
		t.Fatalf("rules of an unknown upstream: %v", err)
	}
	if _, err := s.UpstreamRule(999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown rule: %v", err)
	}
	if snapshot(t, s) != before {
		t.Fatal("a failed create wrote")
	}
}

func TestUpstreamRulesNone(t *testing.T) {
	s, _, _, a, _ := ruleEnv(t)
	rules := ok(s.UpstreamRules(a.ID))(t)
	if len(rules) != 0 {
		t.Fatalf("rules = %v", rules)
	}
}

func TestUpstreamRuleUniqueness(t *testing.T) {
	s, _, _, a, b := ruleEnv(t)
	ok(s.CreateUpstreamRule(newRule(a.ID, "deny", "group_id", "wildcard", "com.*")))(t)
	before := snapshot(t, s)
	_, err := s.CreateUpstreamRule(newRule(a.ID, "deny", "group_id", "wildcard", "com.*"))
	wantValidation(t, err, "pattern", "has already been taken")
	if snapshot(t, s) != before {
		t.Fatal("a refused duplicate wrote")
	}
	// A difference in any one of the four fields, or another upstream, is no duplicate.
	for _, r := range []UpstreamRule{
		newRule(a.ID, "allow", "group_id", "wildcard", "com.*"),
		newRule(a.ID, "deny", "artifact_id", "wildcard", "com.*"),
		newRule(a.ID, "deny", "group_id", "regex", "com.*"),
		newRule(a.ID, "deny", "group_id", "wildcard", "COM.*"), // case-sensitive, as Rails
		newRule(b.ID, "deny", "group_id", "wildcard", "com.*"),
	} {
		if _, err := s.CreateUpstreamRule(r); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
	}
}

func TestUpstreamRuleLimit(t *testing.T) {
	s, _, _, a, b := ruleEnv(t)
	var ids []int64
	for i := range MaxRulesPerUpstream {
		r := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", fmt.Sprintf("g%d", i))))(t)
		ids = append(ids, r.ID)
	}
	before := snapshot(t, s)
	_, err := s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "one.more"))
	wantValidation(t, err, "base", "Maximum of 20 rules per upstream has been reached")
	// A duplicate at the limit gets both messages, as GitLab's model would.
	_, err = s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "g0"))
	wantValidation(t, err, "base", "Maximum of 20 rules per upstream has been reached")
	wantValidation(t, err, "pattern", "has already been taken")
	if snapshot(t, s) != before {
		t.Fatal("a refused 21st rule wrote")
	}
	// The limit is per upstream; an update at the limit is fine.
	ok(s.CreateUpstreamRule(newRule(b.ID, "allow", "group_id", "wildcard", "x")))(t)
	pattern := "changed"
	ok(s.UpdateUpstreamRule(ids[3], UpstreamRulePatch{Pattern: &pattern}))(t)
	// After a delete there is room again.
	noErr(t, s.DeleteUpstreamRule(ids[0]))
	ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "one.more")))(t)
	if n := len(ok(s.UpstreamRules(a.ID))(t)); n != MaxRulesPerUpstream {
		t.Fatalf("%d rules", n)
	}
}

func TestUpdateUpstreamRule(t *testing.T) {
	s, c, _, a, _ := ruleEnv(t)
	r := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "com.*")))(t)
	other := ok(s.CreateUpstreamRule(newRule(a.ID, "deny", "group_id", "wildcard", "org.*")))(t)
	c.Advance(time.Minute)

	gen := s.CacheGeneration()
	deny, version, regex, pattern := "deny", "version", "regex", `-SNAPSHOT$`
	got := ok(s.UpdateUpstreamRule(r.ID, UpstreamRulePatch{RuleType: &deny, TargetCoordinate: &version,
		PatternType: &regex, Pattern: &pattern}))(t)
	want := r
	want.RuleType, want.TargetCoordinate, want.PatternType, want.Pattern = deny, version, regex, pattern
	want.UpdatedAt = c.Now().UTC().Truncate(time.Millisecond)
	if got != want {
		t.Fatalf("updated = %+v, want %+v", got, want)
	}
	if stored := ok(s.UpstreamRule(r.ID))(t); stored != want {
		t.Fatalf("stored = %+v", stored)
	}
	if s.CacheGeneration() == gen {
		t.Fatal("an update did not change the cache generation")
	}

	// Nil fields stay; an empty patch only touches updated_at.
	c.Advance(time.Second)
	got = ok(s.UpdateUpstreamRule(r.ID, UpstreamRulePatch{}))(t)
	if got.Pattern != pattern || got.RuleType != deny || !got.UpdatedAt.After(want.UpdatedAt) {
		t.Fatalf("after an empty patch: %+v", got)
	}

	// Becoming a duplicate of another rule is refused; writing a rule's own
	// fields again is not.
	before := snapshot(t, s)
	allow, group, wildcard, orgStar := "deny", "group_id", "wildcard", "org.*"
	_, err := s.UpdateUpstreamRule(r.ID, UpstreamRulePatch{RuleType: &allow, TargetCoordinate: &group,
		PatternType: &wildcard, Pattern: &orgStar})
	wantValidation(t, err, "pattern", "has already been taken")
	if snapshot(t, s) != before {
		t.Fatal("a refused update wrote")
	}
	ok(s.UpdateUpstreamRule(other.ID, UpstreamRulePatch{Pattern: &orgStar}))(t)

	// Validate sees the rule as it would be written and its messages refuse it.
	var seen UpstreamRule
	before = snapshot(t, s)
	star := "*"
	_, err = s.UpdateUpstreamRule(r.ID, UpstreamRulePatch{Pattern: &star, Validate: func(m UpstreamRule) map[string][]string {
		seen = m
		return map[string][]string{"pattern": {"not valid RE2 syntax: missing argument to repetition operator: `*`"}}
	}})
	wantValidation(t, err, "pattern", "not valid RE2 syntax: missing argument to repetition operator: `*`")
	if seen.ID != r.ID || seen.Pattern != "*" || seen.PatternType != regex || seen.UpstreamID != a.ID {
		t.Fatalf("Validate saw %+v", seen)
	}
	if snapshot(t, s) != before {
		t.Fatal("a rule refused by Validate was written")
	}

	if _, err := s.UpdateUpstreamRule(999, UpstreamRulePatch{Pattern: &star}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown rule: %v", err)
	}
}

// TestUpdateUpstreamRuleValidatesInTx: concurrent updates that are each
// valid on their own but not together never both land; Validate runs on the
// merged rule inside the transaction.
func TestUpdateUpstreamRuleValidatesInTx(t *testing.T) {
	s, _, _, a, _ := ruleEnv(t)
	// A wildcard "*" is fine, a regex "*" is not.
	validate := func(r UpstreamRule) map[string][]string {
		if r.PatternType == "regex" && r.Pattern == "*" {
			return map[string][]string{"pattern": {"not valid RE2 syntax"}}
		}
		return nil
	}
	for i := range 20 {
		r := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", fmt.Sprintf("com%d.*", i))))(t)
		regex, star := "regex", "*"
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = s.UpdateUpstreamRule(r.ID, UpstreamRulePatch{PatternType: &regex, Validate: validate})
		}()
		go func() {
			defer wg.Done()
			_, _ = s.UpdateUpstreamRule(r.ID, UpstreamRulePatch{Pattern: &star, Validate: validate})
		}()
		wg.Wait()
		if got := ok(s.UpstreamRule(r.ID))(t); validate(got) != nil {
			t.Fatalf("an invalid combination was stored: %+v", got)
		}
		noErr(t, s.DeleteUpstreamRule(r.ID))
	}
}

func TestDeleteUpstreamRule(t *testing.T) {
	s, _, _, a, _ := ruleEnv(t)
	r1 := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "a")))(t)
	r2 := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "b")))(t)
	gen := s.CacheGeneration()
	noErr(t, s.DeleteUpstreamRule(r1.ID))
	if s.CacheGeneration() == gen {
		t.Fatal("a delete did not change the cache generation")
	}
	if _, err := s.UpstreamRule(r1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted rule: %v", err)
	}
	if err := s.DeleteUpstreamRule(r1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if got := ruleIDs(ok(s.UpstreamRules(a.ID))(t)); fmt.Sprint(got) != fmt.Sprint([]int64{r2.ID}) {
		t.Fatalf("rules after delete: %v", got)
	}
	// A new rule never reuses an id.
	if r3 := ok(s.CreateUpstreamRule(newRule(a.ID, "allow", "group_id", "wildcard", "a")))(t); r3.ID <= r2.ID {
		t.Fatalf("new rule id %d", r3.ID)
	}
}

// ruleBuckets counts the records of both rule buckets.
func ruleBuckets(t *testing.T, s *Store) (rules, ids int) {
	t.Helper()
	noErr(t, s.db.View(func(tx kv.Tx) error {
		rules = tx.Bucket(bktUpstreamRules).KeyN()
		ids = tx.Bucket(bktRuleUpstream).KeyN()
		return nil
	}))
	return rules, ids
}

func TestUpstreamRulesCascade(t *testing.T) {
	tests := []struct {
		name   string
		delete func(s *Store, reg Registry, a Upstream) error
	}{
		{"delete upstream", func(s *Store, _ Registry, a Upstream) error { return s.DeleteUpstream(a.ID) }},
		{"delete registry", func(s *Store, reg Registry, _ Upstream) error { return s.DeleteRegistry(reg.ID, nil) }},
		{"delete the last association", func(s *Store, _ Registry, a Upstream) error {
			assocs, err := s.UpstreamAssociations(a.ID)
			if err != nil {
				return err
			}
			return s.DeleteAssociation(assocs[0].ID)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, reg, a, b := ruleEnv(t)
			// Upstream a and a second registry's upstream that stays.
			reg2 := ok(s.CreateRegistry(a.GroupID, "other", ""))(t)
			keep := up(t, s, reg2.ID, "https://keep.example/m2").Upstream
			var gone []int64
			for i := range 3 {
				gone = append(gone, ok(s.CreateUpstreamRule(newRule(a.ID, "deny", "group_id", "wildcard", fmt.Sprint("a", i))))(t).ID)
			}
			kept := ok(s.CreateUpstreamRule(newRule(keep.ID, "deny", "group_id", "wildcard", "k")))(t)
			if tt.name == "delete registry" {
				gone = append(gone, ok(s.CreateUpstreamRule(newRule(b.ID, "deny", "group_id", "wildcard", "b")))(t).ID)
			}
			noErr(t, tt.delete(s, reg, a))
			for _, id := range gone {
				if _, err := s.UpstreamRule(id); !errors.Is(err, ErrNotFound) {
					t.Fatalf("rule %d survived: %v", id, err)
				}
			}
			if got := ok(s.UpstreamRule(kept.ID))(t); got != kept {
				t.Fatalf("the other upstream's rule: %+v", got)
			}
			// Only the kept upstream's rule is left, in both buckets.
			if rules, ids := ruleBuckets(t, s); rules != 1 || ids != 1 {
				t.Fatalf("buckets hold %d rules, %d ids; want 1", rules, ids)
			}
		})
	}
}

// TestUpstreamRuleRanges: an upstream's key range holds its rules only, also
// for ids whose big-endian bytes share prefixes.
func TestUpstreamRuleRanges(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	reg := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	var ups []Upstream
	for i := range 3 {
		ups = append(ups, up(t, s, reg.ID, fmt.Sprintf("https://u%d.example/m2", i)).Upstream)
	}
	want := map[int64][]int64{}
	for i := range 12 {
		u := ups[i%3]
		r := ok(s.CreateUpstreamRule(newRule(u.ID, "allow", "artifact_id", "wildcard", fmt.Sprint("p", i))))(t)
		want[u.ID] = append(want[u.ID], r.ID)
	}
	for _, u := range ups {
		if got := ruleIDs(ok(s.UpstreamRules(u.ID))(t)); !reflect.DeepEqual(got, want[u.ID]) {
			t.Fatalf("upstream %d: %v, want %v", u.ID, got, want[u.ID])
		}
	}
	all := ok(s.RegistryUpstreamRules(reg.ID))(t)
	if len(all) != 3 {
		t.Fatalf("RegistryUpstreamRules: %v", all)
	}
	for id, rules := range all {
		if !reflect.DeepEqual(ruleIDs(rules), want[id]) {
			t.Fatalf("RegistryUpstreamRules[%d] = %v, want %v", id, ruleIDs(rules), want[id])
		}
	}
	empty := ok(s.CreateRegistry(g.ID, "empty", ""))(t)
	if got := ok(s.RegistryUpstreamRules(empty.ID))(t); len(got) != 0 {
		t.Fatalf("rules of an empty registry: %v", got)
	}
	if _, err := s.RegistryUpstreamRules(999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown registry: %v", err)
	}
}
