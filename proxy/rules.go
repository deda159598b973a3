package proxy

import (
	"strconv"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"registryd/maven"
	"registryd/store"
)

// Allow/deny rules (docs/api.md, "Rules"): an upstream whose rules refuse a
// file's coordinates is taken out of that file's resolution, cached copies
// included, and the next upstream is asked. The refusal is counted
// (registryd_upstream_rule_denials_total) and recorded as an audit event
// (audit.go). When every upstream refuses, the client gets 403 naming the
// rules.

// deniedError is an upstream taken out of resolution by its rules.
type deniedError struct{ v maven.Verdict }

func (e *deniedError) Error() string { return "refused by its rules: " + e.v.Reason() }

func isDenied(err error) bool {
	_, ok := err.(*deniedError)
	return ok
}

// ruleSets compiles each upstream's rules once per change: a registry view
// is rebuilt on every cache generation (every fill anywhere), and
// compiling regular expressions that often would cost more than the lookup.
type ruleSets struct {
	mu sync.Mutex
	m  map[int64]*upstreamRules
	// verdicts are the verdicts of every upstream's rules, by coordinates
	// (see verdict), so that a repeated download runs no regex.
	verdicts *lru.Cache[verdictKey, maven.Verdict]
	// checks counts verdicts by where they came from (verdictSources).
	checks [2]prometheus.Counter
}

// upstreamRules are an upstream's compiled rules; a nil *upstreamRules is
// none, which allows everything. A recompiled set is a new value: the
// pointer is the rules' generation, which verdict keys hold.
type upstreamRules struct {
	set         *maven.RuleSet
	fingerprint string // the rules' ids and content: changes with any edit
	verdicts    *ruleSets
}

// AllowsVersion is the set's AllowsVersion (merged metadata: one check per
// version of a document, not cached: the versions of one document would
// fill the cache, and the merged answer is cached instead).
func (r *upstreamRules) AllowsVersion(c maven.Coordinates, v string) bool {
	return r == nil || r.set.AllowsVersion(c, v)
}

// verdictKey is a check of one upstream's rules on one file's coordinates:
// rules is the compiled set (its generation); group says the file is
// metadata without a version, which verdict reads twice. The strings are
// owned by the key (never request memory).
type verdictKey struct {
	rules                        *upstreamRules
	group                        bool
	groupID, artifactID, version string
}

// The values of registryd_upstream_rule_checks_total's source label.
var verdictSources = [2]string{"cache", "evaluated"}

// newRuleSets keeps at most verdicts verdicts of all upstreams together
// (Options.Memory.Verdicts).
func newRuleSets(reg prometheus.Registerer, verdicts int) (*ruleSets, error) {
	rs := &ruleSets{m: map[int64]*upstreamRules{}}
	var err error
	if rs.verdicts, err = lru.New[verdictKey, maven.Verdict](verdicts); err != nil {
		return nil, err
	}
	checks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "registryd", Subsystem: "upstream", Name: "rule_checks_total",
		Help: "Checks of an upstream's allow/deny rules on a file's coordinates, by source: cache (a verdict " +
			"given before for the same rules and coordinates) or evaluated.",
	}, []string{"source"})
	for i, src := range verdictSources {
		rs.checks[i] = checks.WithLabelValues(src)
	}
	unevaluated := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "registryd", Subsystem: "upstream", Name: "rules_unevaluated",
		Help: "Stored regex rules that are not evaluated because they do not fit in the regex budget of their " +
			"upstream (written before it existed): each refuses every file that shows its coordinate.",
	}, rs.unevaluated)
	if reg != nil {
		for _, c := range []prometheus.Collector{checks, unevaluated} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return rs, nil
}

// unevaluated counts the unevaluated rules of the compiled sets.
func (s *ruleSets) unevaluated() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.m {
		u, _ := r.set.Unevaluated()
		n += len(u)
	}
	return float64(n)
}

// compileRules returns the compiled form of upstream id's rules (nil:
// none) and their fingerprint ("" for none), which merged-metadata inputs
// include. Stored regexes over the budget are logged once per change.
func (s *engine) compileRules(id int64, list []store.UpstreamRule) (*upstreamRules, string, error) {
	if len(list) == 0 {
		s.rules.mu.Lock()
		delete(s.rules.m, id)
		s.rules.mu.Unlock()
		return nil, "", nil
	}
	// The fingerprint is the rules' content, not their update times: two
	// edits within one millisecond (the store's precision), or a clock
	// step back, must still be seen.
	var fp strings.Builder
	for _, r := range list {
		fp.WriteString(strconv.FormatInt(r.ID, 36))
		for _, f := range [...]string{r.RuleType, r.TargetCoordinate, r.PatternType, r.Pattern} {
			fp.WriteByte(0)
			fp.WriteString(f)
		}
		fp.WriteByte(1)
	}
	s.rules.mu.Lock()
	c, ok := s.rules.m[id]
	s.rules.mu.Unlock()
	if ok && c.fingerprint == fp.String() {
		return c, c.fingerprint, nil
	}
	set, err := maven.CompileRules(toMavenRules(list))
	if err != nil {
		// Rules are validated when written; one that no longer compiles is
		// a corrupt record, which must not silently allow everything.
		return nil, "", err
	}
	if rules, sizes := set.Unevaluated(); len(rules) > 0 {
		for i, r := range rules {
			s.log.Warn("upstream rule not evaluated: its regex does not fit in the upstream's budget; "+
				"the upstream refuses every file that shows its coordinate until the rule is edited or deleted",
				"upstream", id, "rule", r.ID, "target", r.Target, "instructions", sizes[i], "budget", maven.MaxRegexProgram)
		}
	}
	c = &upstreamRules{set: set, fingerprint: fp.String(), verdicts: s.rules}
	s.rules.mu.Lock()
	s.rules.m[id] = c
	s.rules.mu.Unlock()
	return c, c.fingerprint, nil
}

func toMavenRules(list []store.UpstreamRule) []maven.Rule {
	out := make([]maven.Rule, len(list))
	for i, r := range list {
		out[i] = maven.Rule{ID: r.ID, Type: r.RuleType, Target: r.TargetCoordinate, PatternType: r.PatternType, Pattern: r.Pattern}
	}
	return out
}

// screen returns the registry as x's file may be resolved through: without
// the upstreams whose rules refuse it, each of which is recorded in
// x.denied. A registry without rules is returned as it is, at no cost.
func (s *engine) screen(x *request) *registryView {
	reg := x.reg
	if !reg.hasRules {
		return reg
	}
	c := maven.RuleCoordinates(x.path)
	var kept *registryView
	for i, u := range reg.ups {
		v := verdict(u.rules, x.path, c)
		if v.Allowed {
			if kept != nil {
				kept.ups = append(kept.ups, u)
				kept.upIDs = append(kept.upIDs, u.id)
			}
			continue
		}
		if kept == nil {
			k := *reg
			k.ups = append(make([]*upstreamView, 0, len(reg.ups)), reg.ups[:i]...)
			k.upIDs = append(make([]int64, 0, len(reg.ups)), reg.upIDs[:i]...)
			kept = &k
		}
		x.denied = append(x.denied, upstreamFailure{upstream: u.id, err: &deniedError{v}})
		s.deny(x, u, v)
	}
	if kept == nil {
		return reg
	}
	return kept
}

// verdict checks rules against a file with coordinates c, at most once per
// rules and coordinates while the verdict stays in the cache: a repeated
// download costs a lookup, not a regex run. What the cache keeps is copied
// out of c (which may alias the request), so the verdict returned never
// aliases request memory either. Metadata without a version directory
// reads as artifact level (g/a: group g, artifact a) but may be group level
// (the plugin list of group g.a): the path cannot tell them apart. A deny
// rule that matches either reading refuses it; an allow list refuses it
// only when neither reading passes.
func verdict(rules *upstreamRules, p maven.Path, c maven.Coordinates) maven.Verdict {
	if rules == nil {
		return maven.Verdict{Allowed: true}
	}
	group := p.EntryKind() == maven.MetadataKind && p.Version == "" && c.ArtifactID != ""
	k := verdictKey{rules: rules, group: group, groupID: c.GroupID, artifactID: c.ArtifactID, version: c.Version}
	cache := rules.verdicts
	if v, ok := cache.verdicts.Get(k); ok {
		cache.checks[0].Inc()
		return v
	}
	cache.checks[1].Inc()
	v := evaluate(rules.set, group, c)
	k.groupID, k.artifactID, k.version = strings.Clone(c.GroupID), strings.Clone(c.ArtifactID), strings.Clone(c.Version)
	v.Value = strings.Clone(v.Value)
	cache.verdicts.Add(k, v)
	return v
}

// evaluate is verdict without the cache; group: read both ways.
func evaluate(rules *maven.RuleSet, group bool, c maven.Coordinates) maven.Verdict {
	v := rules.Check(c)
	if !group {
		return v
	}
	g := rules.Check(maven.Coordinates{GroupID: c.GroupID + "." + c.ArtifactID})
	switch {
	case v.Rule != nil: // a deny rule matched the artifact-level reading
		return v
	case g.Rule != nil:
		return g
	case g.Allowed:
		return g
	}
	return v
}

// deny counts one refusal and queues its audit event.
func (s *engine) deny(x *request, u *upstreamView, v maven.Verdict) {
	s.met.denials.WithLabelValues(u.label).Inc()
	s.audit.denied(x, u, v)
}
