package admin

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"registryd/store"
)

// What the GitLab list endpoints (groups, projects, members, tokens) share:
// GitLab's fuzzy search, integer-array parameters and slicing a page out of
// a filtered, sorted list.

// minPartialMatch is the length from which a search term matches anywhere in
// a field (Gitlab::SQL::Pattern's MIN_CHARS_FOR_PARTIAL_MATCHING). A shorter
// query only matches a whole field.
const minPartialMatch = 3

// search is a parsed search query, as GitLab's fuzzy_search reads one:
// blanks squeezed, "quoted phrases" kept whole, the rest split on blanks.
type search struct {
	query string   // the squeezed query, lower-cased
	terms []string // lower-cased terms long enough to match partially
}

// newSearch parses q; anyLength makes terms of every length match
// partially, as GitLab's user search does (use_minimum_char_limit: false).
// A blank q is nil: no filter.
func newSearch(q *string, anyLength bool) *search {
	if q == nil {
		return nil
	}
	squeezed := strings.ToLower(strings.Join(strings.Fields(*q), " "))
	if squeezed == "" {
		return nil
	}
	s := &search{query: squeezed}
	quoted, rest := splitQuoted(squeezed)
	for _, t := range append(strings.Fields(rest), quoted...) {
		if anyLength || utf8.RuneCountInString(t) >= minPartialMatch {
			s.terms = append(s.terms, t)
		}
	}
	return s
}

// splitQuoted takes the "quoted phrases" standing alone (between blanks or
// the ends) out of a squeezed query, as GitLab's (?<=^| )"[^"]+"(?= |$).
// Go's regexp has no lookarounds, and matching the blanks instead would use
// up the one between two phrases side by side ("a b" "c d"), so the
// neighbours are checked here by hand.
func splitQuoted(q string) (quoted []string, rest string) {
	var b strings.Builder
	from := 0 // q[from:i] is not quoted
	for i := 0; i < len(q); i++ {
		if q[i] != '"' || (i > 0 && q[i-1] != ' ') {
			continue
		}
		j := strings.IndexByte(q[i+1:], '"')
		if j < 1 { // no closing quote, or nothing between the two
			continue
		}
		end := i + 1 + j // the closing quote
		if end+1 < len(q) && q[end+1] != ' ' {
			continue
		}
		quoted = append(quoted, q[i+1:end])
		b.WriteString(q[from:i])
		b.WriteByte(' ')
		from, i = end+1, end
	}
	b.WriteString(q[from:])
	return quoted, b.String()
}

// matches reports whether any of fields matches: every term is a
// case-insensitive substring of it or, when no term is long enough, it
// equals the whole query case-insensitively. A nil search matches all.
func (s *search) matches(fields ...string) bool {
	if s == nil {
		return true
	}
	for _, f := range fields {
		f = strings.ToLower(f)
		if len(s.terms) == 0 {
			if f == s.query {
				return true
			}
			continue
		}
		all := true
		for _, t := range s.terms {
			if !strings.Contains(f, t) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// ints returns an optional array of integers: `k[]=1&k[]=2`, a JSON array
// or a comma-separated string.
func (p *params) ints(name string) []int64 {
	if !p.has(name) {
		return nil
	}
	var texts []string
	if arr, ok := p.values[name].([]any); ok {
		for _, e := range arr {
			switch t := e.(type) {
			case string:
				texts = append(texts, strings.TrimSpace(t))
			case json.Number:
				texts = append(texts, t.String())
			default:
				p.fail(name + " is invalid")
				return nil
			}
		}
	} else {
		texts = p.strings(name)
	}
	var out []int64
	for _, s := range texts {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			p.fail(name + " is invalid")
			return nil
		}
		out = append(out, n)
	}
	return out
}

// minAccessLevel reads min_access_level, one of the five member levels.
func (p *params) minAccessLevel() *int {
	lvl := p.integer("min_access_level")
	if lvl != nil && !store.ValidAccessLevel(*lvl) {
		p.fail("min_access_level does not have a valid value")
		return nil
	}
	return lvl
}

// ordering reads order_by (default def) among allowed and sort (default
// defSort, asc or desc); desc is true for a descending order.
func (p *params) ordering(def, defSort string, allowed ...string) (by string, desc bool) {
	by, dir := def, defSort
	if v := p.oneOf("order_by", allowed...); v != nil {
		by = *v
	}
	if v := p.oneOf("sort", "asc", "desc"); v != nil {
		dir = *v
	}
	return by, dir == "desc"
}

// pageOf is the page pg of items.
func pageOf[T any](items []T, pg page) []T {
	from := min(pg.Offset(), len(items))
	to := min(from+pg.PerPage, len(items))
	return items[from:to]
}
