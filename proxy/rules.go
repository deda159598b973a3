package proxy

import (
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

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
	m  map[int64]compiledRules
}

type compiledRules struct {
	fingerprint string // the rules' ids and content: changes with any edit
	set         *maven.RuleSet
}

// compile returns the compiled form of upstream id's rules (nil: none)
// and their fingerprint ("" for none), which merged-metadata inputs include.
func (s *Server) compileRules(id int64, list []store.UpstreamRule) (*maven.RuleSet, string, error) {
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
		return c.set, c.fingerprint, nil
	}
	set, err := maven.CompileRules(toMavenRules(list))
	if err != nil {
		// Rules are validated when written; one that no longer compiles is
		// a corrupt record, which must not silently allow everything.
		return nil, "", err
	}
	c = compiledRules{fingerprint: fp.String(), set: set}
	s.rules.mu.Lock()
	if s.rules.m == nil {
		s.rules.m = map[int64]compiledRules{}
	}
	s.rules.m[id] = c
	s.rules.mu.Unlock()
	return c.set, c.fingerprint, nil
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
func (s *Server) screen(x *exchange) *registryView {
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

// verdict checks rules against a file with coordinates c. Metadata without
// a version directory reads as artifact level (g/a: group g, artifact a)
// but may be group level (the plugin list of group g.a): the path cannot
// tell them apart. A deny rule that matches either reading refuses it; an
// allow list refuses it only when neither reading passes.
func verdict(rules *maven.RuleSet, p maven.Path, c maven.Coordinates) maven.Verdict {
	v := rules.Check(c)
	if rules == nil || p.EntryKind() != maven.MetadataKind || p.Version != "" || c.ArtifactID == "" {
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
func (s *Server) deny(x *exchange, u *upstreamView, v maven.Verdict) {
	s.met.denials.WithLabelValues(u.label).Inc()
	s.audit.denied(x, u, v)
}

// errAllDenied is GitLab's answer when the rules leave no upstream for a
// file; problem documents name each upstream's rule.
var errAllDenied = message(fasthttp.StatusForbidden,
	"403 Forbidden - All upstreams are filtered out because of existing allow/deny rules")
