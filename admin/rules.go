package admin

import (
	"net/http"
	"strings"

	"registryd/maven"
	"registryd/store"
)

// Allow/deny rules of an upstream (GitLab 18.9's Upstream::Rule). GitLab
// offers them over GraphQL only; registryd's REST path nests them under the
// upstream, with GitLab's field names, defaults and validation messages.
func (s *Server) routesRules() {
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}/rules", s.listRules)
	s.handle(http.MethodPost, vrBase+"/upstreams/{id}/rules", s.createRule)
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}/rules/{rule_id}", s.getRule)
	s.handle(http.MethodPatch, vrBase+"/upstreams/{id}/rules/{rule_id}", s.updateRule)
	s.handle(http.MethodDelete, vrBase+"/upstreams/{id}/rules/{rule_id}", s.deleteRule)
}

type ruleView struct {
	ID               int64    `json:"id"`
	UpstreamID       int64    `json:"upstream_id"`
	GroupID          int64    `json:"group_id"`
	RuleType         string   `json:"rule_type"`
	TargetCoordinate string   `json:"target_coordinate"`
	PatternType      string   `json:"pattern_type"`
	Pattern          string   `json:"pattern"`
	CreatedAt        jsonTime `json:"created_at"`
	UpdatedAt        jsonTime `json:"updated_at"`
}

func ruleJSON(r store.UpstreamRule) ruleView {
	return ruleView{ID: r.ID, UpstreamID: r.UpstreamID, GroupID: r.GroupID, RuleType: r.RuleType,
		TargetCoordinate: r.TargetCoordinate, PatternType: r.PatternType, Pattern: r.Pattern,
		CreatedAt: jsonTime(r.CreatedAt), UpdatedAt: jsonTime(r.UpdatedAt)}
}

// validateRule is the model validation of a rule as it will be stored.
func validateRule(r store.UpstreamRule) map[string][]string {
	return maven.ValidateRule(mavenRule(r))
}

func mavenRule(r store.UpstreamRule) maven.Rule {
	return maven.Rule{ID: r.ID, Type: r.RuleType, Target: r.TargetCoordinate, PatternType: r.PatternType, Pattern: r.Pattern}
}

// validateRuleBeside is validateRule plus the regex budget of the upstream
// (maven.RegexBudget): the rule's program and those of others, the
// upstream's rules read before the write, may not exceed it together. Two
// writes racing past each other can exceed it; the proxy then leaves the
// later rule unevaluated (maven.CompileRules), so the bound on what a
// download costs holds either way.
func validateRuleBeside(others []store.UpstreamRule) func(store.UpstreamRule) map[string][]string {
	list := make([]maven.Rule, len(others))
	for i, o := range others {
		list[i] = mavenRule(o)
	}
	return func(r store.UpstreamRule) map[string][]string {
		if errs := validateRule(r); errs != nil {
			return errs
		}
		return maven.RegexBudget(mavenRule(r), list)
	}
}

// The enum parameters, checked as Grape checks `values:` (400 {"error":
// "rule_type does not have a valid value"}).
func (p *params) ruleType() *string { return p.oneOf("rule_type", maven.RuleAllow, maven.RuleDeny) }
func (p *params) ruleTarget() *string {
	return p.oneOf("target_coordinate", maven.TargetGroupID, maven.TargetArtifactID, maven.TargetVersion)
}
func (p *params) rulePatternType() *string {
	return p.oneOf("pattern_type", maven.PatternWildcard, maven.PatternRegex)
}

// ruleByID finds the {rule_id} rule of the {id} upstream after checking the
// caller's access to the upstream. A rule of another upstream is not found.
func (s *Server) ruleByID(r *http.Request, need access) (store.UpstreamRule, error) {
	u, err := s.upstreamByID(r, need)
	if err != nil {
		return store.UpstreamRule{}, err
	}
	id, err := pathID(r, "rule_id")
	if err != nil {
		return store.UpstreamRule{}, err
	}
	rule, err := s.st.UpstreamRule(id)
	if err != nil {
		return rule, err
	}
	if rule.UpstreamID != u.ID {
		return store.UpstreamRule{}, errRecordMissing
	}
	return rule, nil
}

func (s *Server) listRules(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, read)
	if err != nil {
		return err
	}
	rules, err := s.st.UpstreamRules(u.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapViews(rules, ruleJSON))
	return nil
}

func (s *Server) createRule(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, manage)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	// GitLab's table defaults.
	rule := store.UpstreamRule{UpstreamID: u.ID, RuleType: maven.RuleAllow, TargetCoordinate: maven.TargetGroupID,
		PatternType: maven.PatternWildcard}
	rule.Pattern = in.required("pattern")
	if v := in.ruleType(); v != nil {
		rule.RuleType = *v
	}
	if v := in.ruleTarget(); v != nil {
		rule.TargetCoordinate = *v
	}
	if v := in.rulePatternType(); v != nil {
		rule.PatternType = *v
	}
	if err := in.err(); err != nil {
		return err
	}
	others, err := s.st.UpstreamRules(u.ID)
	if err != nil {
		return err
	}
	if errs := validateRuleBeside(others)(rule); errs != nil {
		return &store.ValidationError{Fields: errs}
	}
	created, err := s.st.CreateUpstreamRule(rule)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ruleJSON(created))
	return nil
}

func (s *Server) getRule(w http.ResponseWriter, r *http.Request) error {
	rule, err := s.ruleByID(r, read)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ruleJSON(rule))
	return nil
}

// rulePatchFields are the fields of a rule PATCH, as Grape names them when
// none is given.
const rulePatchFields = "pattern, pattern_type, rule_type, target_coordinate"

func (s *Server) updateRule(w http.ResponseWriter, r *http.Request) error {
	rule, err := s.ruleByID(r, manage)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	others, err := s.st.UpstreamRules(rule.UpstreamID)
	if err != nil {
		return err
	}
	p := store.UpstreamRulePatch{Pattern: in.str("pattern"), RuleType: in.ruleType(),
		TargetCoordinate: in.ruleTarget(), PatternType: in.rulePatternType(), Validate: validateRuleBeside(others)}
	if p.Pattern == nil && p.RuleType == nil && p.TargetCoordinate == nil && p.PatternType == nil && len(in.errs) == 0 {
		in.fail(rulePatchFields + " are missing, at least one parameter must be provided")
	}
	if p.Pattern != nil && strings.TrimSpace(*p.Pattern) == "" {
		in.fail("pattern is empty")
	}
	if err := in.err(); err != nil {
		return err
	}
	updated, err := s.st.UpdateUpstreamRule(rule.ID, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ruleJSON(updated))
	return nil
}

func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request) error {
	rule, err := s.ruleByID(r, manage)
	if err != nil {
		return err
	}
	if err := s.st.DeleteUpstreamRule(rule.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
