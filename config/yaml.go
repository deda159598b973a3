package config

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// applyYAML overlays the YAML document raw (read from file) onto cfg.
//
// It walks the document itself instead of letting yaml.v3 decode into the
// struct, for two reasons. The decoder's messages name Go types ("field
// read_timout not found in type config.Proxy", "cannot unmarshal !!str
// `soon` into time.Duration"), which mean nothing to an operator; here every
// problem says where it is (file:line), which setting, and what is wrong in
// the words the environment variables use, with a "did you mean" for a
// misspelt key. And each value is parsed by setNode, the parser of the
// environment variables, so a value means the same in both places (the
// decoder would take "read_timeout: 60" as 60 nanoseconds). What the
// decoder accepted still loads the same: YAML 1.1 booleans (yes, off),
// integers as YAML writes them (0x10, 1_000) and `<<` merge keys (entries).
//
// A syntax error stops at once (the rest of the file cannot be trusted) and
// is returned as error; everything else is collected in Problems. A key with
// no value (`pprof_listen:`) keeps its default. Each setting the file sets
// is recorded in origin (when not nil) as "file:line" under its name
// ("proxy.listen"), for Load to say where a value Validate refuses came from.
func applyYAML(cfg *Config, file string, raw []byte, origin map[string]string) (Problems, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s is not valid YAML: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil // an empty file (or only comments) is no settings
	}
	var p Problems
	at := func(n *yaml.Node, format string, a ...any) {
		p = append(p, fmt.Sprintf("%s:%d: ", file, n.Line)+fmt.Sprintf(format, a...))
	}
	root := resolveAlias(doc.Content[0])
	if isNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		at(root, "expected sections (data:, proxy:, admin:, ...) at the top level, got %s", describe(root))
		return p, nil
	}
	set := func(key string, n *yaml.Node) {
		if origin != nil {
			origin[key] = fmt.Sprintf("%s:%d", file, n.Line)
		}
	}
	sections := sectionFields(cfg)
	seen := map[string]int{}
	for _, e := range entries(root, "", at) {
		key, val := e.key, e.val
		name := key.Value
		sec, ok := sections[name]
		if !ok || key.Kind != yaml.ScalarNode {
			at(key, "unknown section %q%s", name, didYouMean(name, keysOf(sections)))
			continue
		}
		if line, dup := seen[name]; dup {
			at(key, "section %q appears twice (also on line %d); write its settings once", name, line)
			continue
		}
		seen[name] = key.Line
		if isNull(val) {
			continue
		}
		if val.Kind != yaml.MappingNode {
			at(val, "%s: expected settings under it (one \"key: value\" a line), got %s", name, describe(val))
			continue
		}
		applySettings(cfg, name, val, sec, at, set)
	}
	return p, nil
}

// applySettings overlays the mapping val onto the section (or subsection)
// sec, named name ("store", "store.postgres"). A setting that is itself a
// group of settings (store.postgres) takes a mapping and is walked the same
// way. set records each setting set, with the key's node.
func applySettings(cfg *Config, name string, val *yaml.Node, sec reflect.Value, at func(*yaml.Node, string, ...any), set func(string, *yaml.Node)) {
	settings := settingFields(sec)
	seenKey := map[string]int{}
	for _, e := range entries(val, name+": ", at) {
		k, v := e.key, e.val
		f, ok := settings[k.Value]
		if !ok || k.Kind != yaml.ScalarNode {
			at(k, "%s: unknown setting %q%s", name, k.Value, suggestSetting(cfg, name, k.Value, keysOf(settings)))
			continue
		}
		if line, dup := seenKey[k.Value]; dup {
			at(k, "%s.%s is set twice (also on line %d)", name, k.Value, line)
			continue
		}
		seenKey[k.Value] = k.Line
		if isNull(v) {
			continue
		}
		if isSubsection(f) {
			if v.Kind != yaml.MappingNode {
				at(v, "%s.%s: expected settings under it (one \"key: value\" a line), got %s", name, k.Value, describe(v))
				continue
			}
			applySettings(cfg, name+"."+k.Value, v, f, at, set)
			continue
		}
		if v.Kind != yaml.ScalarNode {
			at(v, "%s.%s: expected one value, got %s", name, k.Value, describe(v))
			continue
		}
		if err := setNode(f, v); err != nil {
			at(v, "%s.%s: %v", name, k.Value, err)
			continue
		}
		set(name+"."+k.Value, k)
	}
}

type entry struct{ key, val *yaml.Node }

// entries lists the key/value pairs of the mapping m (aliases resolved) the
// way yaml.v3 decoded a mapping into a struct, merge keys included: first
// m's own keys, then those its `<<` brings in (a mapping, or a list of
// them, as an anchor or written in place), each only when no earlier
// mapping had it, so the keys written next to `<<` win, and in a list the
// first mapping wins. A merged mapping's own `<<` is expanded in turn.
// Duplicates within one mapping are all listed: the caller reports them.
// A second `<<` in one mapping, a `<<` that brings no mapping, or a mapping
// that merges itself is a problem (prefix names the section), as yaml.v3
// refused them too.
func entries(m *yaml.Node, prefix string, at func(*yaml.Node, string, ...any)) []entry {
	var out []entry
	have := map[string]bool{} // keys of the mappings already listed
	done := map[*yaml.Node]bool{}
	onPath := map[*yaml.Node]bool{}
	var walk func(m *yaml.Node)
	mergeFrom := func(key, from *yaml.Node) {
		switch {
		case onPath[from]:
			at(key, "%s\"<<\" names the anchor of the settings it is in, so they would merge themselves", prefix)
		case !done[from]: // merged twice, it has nothing left to bring
			walk(from)
		}
	}
	walk = func(m *yaml.Node) {
		done[m], onPath[m] = true, true
		defer delete(onPath, m)
		var merge, mergeKey *yaml.Node
		var own []string
		for i := 0; i+1 < len(m.Content); i += 2 {
			if isMerge(m.Content[i]) {
				if merge != nil {
					at(m.Content[i], "%s\"<<\" is written twice (also on line %d); merge a list instead: \"<<: [*a, *b]\"", prefix, mergeKey.Line)
				}
				merge, mergeKey = m.Content[i+1], m.Content[i]
				continue
			}
			k := resolveAlias(m.Content[i])
			if isNull(k) || k.Kind == yaml.ScalarNode && have[k.Value] {
				continue // yaml.v3 skipped a key without a name too
			}
			if k.Kind == yaml.ScalarNode {
				own = append(own, k.Value)
			}
			out = append(out, entry{k, resolveAlias(m.Content[i+1])})
		}
		for _, k := range own {
			have[k] = true
		}
		if merge == nil {
			return
		}
		from := resolveAlias(merge)
		switch from.Kind {
		case yaml.MappingNode:
			mergeFrom(mergeKey, from)
			return
		case yaml.SequenceNode:
			for _, el := range from.Content {
				if el = resolveAlias(el); el.Kind != yaml.MappingNode {
					at(el, "%s\"<<\" merges groups of settings (\"<<: *name\" or \"<<: [*a, *b]\"), got %s in its list", prefix, describe(el))
					continue
				}
				mergeFrom(mergeKey, el)
			}
			return
		}
		at(from, "%s\"<<\" merges groups of settings (\"<<: *name\" or \"<<: [*a, *b]\"), got %s", prefix, describe(from))
	}
	walk(m)
	return out
}

// isMerge is yaml.v3's test for a merge key: a plain `<<` (or one tagged
// !!merge); a quoted "<<" is an ordinary key.
func isMerge(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && (n.Tag == "" || n.Tag == "!" || n.ShortTag() == "!!merge")
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names a node's shape in an operator's words.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a group of settings"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "no value"
		}
		return fmt.Sprintf("the single value %q", n.Value)
	}
	return "something else"
}

// sectionFields maps each section's YAML name to its struct in cfg.
func sectionFields(cfg *Config) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	root := reflect.ValueOf(cfg).Elem()
	for i := 0; i < root.NumField(); i++ {
		out[yamlName(root.Type().Field(i))] = root.Field(i)
	}
	return out
}

// settingFields maps each setting's YAML name to its field in sec.
func settingFields(sec reflect.Value) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	for j := 0; j < sec.NumField(); j++ {
		out[yamlName(sec.Type().Field(j))] = sec.Field(j)
	}
	return out
}

// suggestSetting is the hint for an unknown key of section: a close
// spelling in the same section, or the section the key belongs to.
func suggestSetting(cfg *Config, section, key string, siblings []string) string {
	if s := didYouMean(key, siblings); s != "" {
		return s
	}
	var homes []string
	for name, sec := range sectionFields(cfg) {
		if _, ok := settingFields(sec)[normalizeKey(key)]; ok && name != section {
			homes = append(homes, name)
		}
	}
	if len(homes) == 1 {
		return fmt.Sprintf(" (it belongs under %q: %s.%s)", homes[0], homes[0], normalizeKey(key))
	}
	return ""
}

// didYouMean is ` (did you mean "x"?)` for the option closest to got when
// it is close enough to be a misspelling (or the same name written with
// dashes or capitals), else "".
func didYouMean(got string, options []string) string {
	if best := closest(normalizeKey(got), options); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// closest is the option nearest to got in edit distance, when at most two
// edits away (one for names of four letters or fewer), else "".
func closest(got string, options []string) string {
	best, bestD := "", 1<<30
	for _, o := range options {
		d := levenshtein(got, o)
		if d < bestD || d == bestD && o < best {
			best, bestD = o, d
		}
	}
	limit := 2
	if len(got) <= 4 {
		limit = 1
	}
	if bestD > limit {
		return ""
	}
	return best
}

func normalizeKey(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
}

// levenshtein is the edit distance of a and b (bytes; the names are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
