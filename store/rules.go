package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"registryd/store/kv"
)

// MaxRulesPerUpstream is GitLab's MAX_RULES_PER_UPSTREAM.
const MaxRulesPerUpstream = 20

// UpstreamRule is one allow/deny rule of an upstream (GitLab 18.9's
// VirtualRegistries::Packages::Maven::Upstream::Rule). GroupID is the
// upstream's top-level group. What the fields may hold (the enums, the
// pattern formats) is Maven knowledge: the caller validates them
// (maven.ValidateRule); the store keeps what needs a transaction: the
// upstream exists, the rule is unique on (upstream, target_coordinate,
// pattern, pattern_type, rule_type), and an upstream has at most
// MaxRulesPerUpstream rules.
type UpstreamRule struct {
	ID               int64     `json:"id"`
	UpstreamID       int64     `json:"upstream_id"`
	GroupID          int64     `json:"group_id"`
	RuleType         string    `json:"rule_type"`
	TargetCoordinate string    `json:"target_coordinate"`
	PatternType      string    `json:"pattern_type"`
	Pattern          string    `json:"pattern"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// UpstreamRulePatch lists the fields an update changes; nil leaves a field
// alone.
type UpstreamRulePatch struct {
	RuleType, TargetCoordinate, PatternType, Pattern *string
	// Validate, when set, checks the rule as the update would write it,
	// inside the transaction (field -> messages, nil when valid). Fields
	// interact (a pattern's format depends on the target and the pattern
	// type), so a check of the merged rule made before the transaction could
	// pass two concurrent updates whose combination is invalid.
	Validate func(UpstreamRule) map[string][]string
}

// The messages of GitLab's Rule model.
const (
	msgRuleTaken = "has already been taken"
	msgRulesMax  = "Maximum of 20 rules per upstream has been reached"
)

func ruleKey(upstream, id int64) []byte { return pair(upstream, id) }

// upstreamRulesTx lists an upstream's rules in id order: one cursor walk over
// its key range.
func upstreamRulesTx(tx kv.Tx, upstream int64) []UpstreamRule {
	var out []UpstreamRule
	prefix := itob(upstream)
	c := tx.Bucket(bktUpstreamRules).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var r UpstreamRule
		// As getJSON: a record this package wrote that does not decode is
		// a corrupt database.
		if err := json.Unmarshal(v, &r); err != nil {
			panic(fmt.Sprintf("store: corrupt record %x: %v", k, err))
		}
		out = append(out, r)
	}
	return out
}

func upstreamRuleTx(tx kv.Tx, id int64) (UpstreamRule, bool) {
	var r UpstreamRule
	up := tx.Bucket(bktRuleUpstream).Get(itob(id))
	if up == nil {
		return r, false
	}
	return r, getJSON(tx.Bucket(bktUpstreamRules), ruleKey(btoi(up), id), &r)
}

// duplicateRule reports whether another rule in list has r's unique fields.
func duplicateRule(list []UpstreamRule, r UpstreamRule) bool {
	for _, o := range list {
		if o.ID != r.ID && o.TargetCoordinate == r.TargetCoordinate && o.Pattern == r.Pattern &&
			o.PatternType == r.PatternType && o.RuleType == r.RuleType {
			return true
		}
	}
	return false
}

func putRuleTx(tx kv.Tx, r UpstreamRule) error {
	return putJSON(tx.Bucket(bktUpstreamRules), ruleKey(r.UpstreamID, r.ID), r)
}

// UpstreamRules lists an upstream's rules in id order.
func (s *Store) UpstreamRules(upstreamID int64) ([]UpstreamRule, error) {
	var out []UpstreamRule
	err := s.db.View(func(tx kv.Tx) error {
		if tx.Bucket(bktUpstreams).Get(itob(upstreamID)) == nil {
			return notFound("Upstream")
		}
		out = upstreamRulesTx(tx, upstreamID)
		return nil
	})
	return out, err
}

// RegistryUpstreamRules returns the rules of every upstream of a registry,
// by upstream id (an upstream without rules has no key), read in one
// transaction so that they belong to one CacheGeneration.
func (s *Store) RegistryUpstreamRules(registry int64) (map[int64][]UpstreamRule, error) {
	out := map[int64][]UpstreamRule{}
	err := s.db.View(func(tx kv.Tx) error {
		if _, ok := registryTx(tx, registry); !ok {
			return notFound("Registry")
		}
		for _, a := range assocsOfRegistryTx(tx, registry) {
			if rules := upstreamRulesTx(tx, a.UpstreamID); len(rules) > 0 {
				out[a.UpstreamID] = rules
			}
		}
		return nil
	})
	return out, err
}

// UpstreamRule returns a rule by id.
func (s *Store) UpstreamRule(id int64) (UpstreamRule, error) {
	var r UpstreamRule
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		if r, ok = upstreamRuleTx(tx, id); !ok {
			return notFound("Upstream Rule")
		}
		return nil
	})
	return r, err
}

// CreateUpstreamRule adds a rule to r.UpstreamID; ID, GroupID and the
// timestamps are set here. The fields must have been validated
// (maven.ValidateRule). A duplicate gets a ValidationError on "pattern", the
// 21st rule one on "base", both in GitLab's words.
func (s *Store) CreateUpstreamRule(r UpstreamRule) (UpstreamRule, error) {
	now := s.clock()
	r.CreatedAt, r.UpdatedAt = now, now
	in := r
	err := s.update(false, true, func(tx kv.Tx) error {
		// duplicateRule skips r.ID: not an id drawn by an earlier run (kv
		// may run the function again).
		r = in
		var u Upstream
		if !getJSON(tx.Bucket(bktUpstreams), itob(r.UpstreamID), &u) {
			return notFound("Upstream")
		}
		r.GroupID = u.GroupID
		list := upstreamRulesTx(tx, r.UpstreamID)
		v := &ValidationError{}
		if duplicateRule(list, r) {
			v.Add("pattern", msgRuleTaken)
		}
		if len(list) >= MaxRulesPerUpstream {
			v.Add("base", msgRulesMax)
		}
		if err := v.Err(); err != nil {
			return err
		}
		id, err := nextID(tx.Bucket(bktRuleUpstream))
		if err != nil {
			return err
		}
		r.ID = id
		if err := tx.Bucket(bktRuleUpstream).Put(itob(id), itob(r.UpstreamID)); err != nil {
			return err
		}
		return putRuleTx(tx, r)
	})
	if err != nil {
		return UpstreamRule{}, err
	}
	return r, nil
}

// UpdateUpstreamRule changes a rule's fields (see UpstreamRulePatch).
func (s *Store) UpdateUpstreamRule(id int64, p UpstreamRulePatch) (UpstreamRule, error) {
	var r UpstreamRule
	err := s.update(false, true, func(tx kv.Tx) error {
		var ok bool
		if r, ok = upstreamRuleTx(tx, id); !ok {
			return notFound("Upstream Rule")
		}
		set := func(dst *string, src *string) {
			if src != nil {
				*dst = *src
			}
		}
		set(&r.RuleType, p.RuleType)
		set(&r.TargetCoordinate, p.TargetCoordinate)
		set(&r.PatternType, p.PatternType)
		set(&r.Pattern, p.Pattern)
		v := &ValidationError{}
		if p.Validate != nil {
			for field, msgs := range p.Validate(r) {
				for _, m := range msgs {
					v.Add(field, m)
				}
			}
		}
		if duplicateRule(upstreamRulesTx(tx, r.UpstreamID), r) {
			v.Add("pattern", msgRuleTaken)
		}
		if err := v.Err(); err != nil {
			return err
		}
		r.UpdatedAt = s.clock()
		return putRuleTx(tx, r)
	})
	if err != nil {
		return UpstreamRule{}, err
	}
	return r, nil
}

// DeleteUpstreamRule removes a rule.
func (s *Store) DeleteUpstreamRule(id int64) error {
	return s.update(false, true, func(tx kv.Tx) error {
		r, ok := upstreamRuleTx(tx, id)
		if !ok {
			return notFound("Upstream Rule")
		}
		if err := tx.Bucket(bktUpstreamRules).Delete(ruleKey(r.UpstreamID, id)); err != nil {
			return err
		}
		return tx.Bucket(bktRuleUpstream).Delete(itob(id))
	})
}

// deleteUpstreamRulesTx removes every rule of an upstream (the upstream is
// being deleted).
func deleteUpstreamRulesTx(tx kv.Tx, upstream int64) error {
	rules, ids := tx.Bucket(bktUpstreamRules), tx.Bucket(bktRuleUpstream)
	prefix := itob(upstream)
	var keys [][]byte
	c := rules.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k)) // no deletes while the cursor walks
	}
	for _, k := range keys {
		if err := rules.Delete(k); err != nil {
			return err
		}
		if err := ids.Delete(k[8:]); err != nil {
			return err
		}
	}
	return nil
}
