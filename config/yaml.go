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
// misspelt key. And each value is parsed by setValue, the parser of the
// environment variables, so a value means the same in both places (the
// decoder would take "read_timeout: 60" as 60 nanoseconds).
//
// A syntax error stops at once (the rest of the file cannot be trusted) and
// is returned as error; everything else is collected in Problems. A key with
// no value (`pprof_listen:`) keeps its default.
func applyYAML(cfg *Config, file string, raw []byte) (Problems, error) {
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
	sections := sectionFields(cfg)
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := resolveAlias(root.Content[i]), resolveAlias(root.Content[i+1])
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
		settings := settingFields(sec)
		seenKey := map[string]int{}
		for j := 0; j+1 < len(val.Content); j += 2 {
			k, v := resolveAlias(val.Content[j]), resolveAlias(val.Content[j+1])
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
			if v.Kind != yaml.ScalarNode {
				at(v, "%s.%s: expected one value, got %s", name, k.Value, describe(v))
				continue
			}
			if err := setValue(f, v.Value); err != nil {
				at(v, "%s.%s: %v", name, k.Value, err)
			}
		}
	}
	return p, nil
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
