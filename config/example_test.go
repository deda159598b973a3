package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const exampleFile = "registryd.example.yaml"

// TestExampleFile keeps config/registryd.example.yaml true: it loads and
// validates, every value in it is the default, and it names every setting
// of Config, each with a comment, and nothing else. A new field, a changed
// default or a renamed key fails here until the file says so.
func TestExampleFile(t *testing.T) {
	cfg, err := Load(exampleFile, nil)
	if err != nil {
		t.Fatalf("the example does not load: %v", err)
	}
	if cfg != loadedDefaults() {
		t.Errorf("the example's values differ from the defaults:\n file     %+v\n defaults %+v", cfg, loadedDefaults())
	}

	raw, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	var named []string
	// walk checks the settings of one section (or subsection, such as
	// store.postgres, whose key also needs a comment) and names them.
	var walk func(prefix string, settings *yaml.Node)
	walk = func(prefix string, settings *yaml.Node) {
		for j := 0; j+1 < len(settings.Content); j += 2 {
			k, v := settings.Content[j], settings.Content[j+1]
			name := prefix + "." + k.Value
			if strings.TrimSpace(k.HeadComment+k.LineComment+v.LineComment) == "" {
				t.Errorf("%s has no comment", name)
			}
			if strings.Count(strings.TrimSpace(k.HeadComment), "\n") > 0 {
				t.Errorf("%s: the comment is more than one line:\n%s", name, k.HeadComment)
			}
			if v.Kind == yaml.MappingNode {
				walk(name, v)
				continue
			}
			named = append(named, name)
			if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
				t.Errorf("%s has no value: write the default", name)
			}
		}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		section, settings := root.Content[i].Value, root.Content[i+1]
		if settings.Kind != yaml.MappingNode {
			t.Errorf("section %s has no settings", section)
			continue
		}
		walk(section, settings)
	}
	var fields []string
	var leaves func(prefix string, sec reflect.Type)
	leaves = func(prefix string, sec reflect.Type) {
		for j := 0; j < sec.NumField(); j++ {
			f := sec.Field(j)
			if f.Type.Kind() == reflect.Struct {
				leaves(prefix+"."+yamlName(f), f.Type)
				continue
			}
			fields = append(fields, prefix+"."+yamlName(f))
		}
	}
	c := reflect.TypeOf(Config{})
	for i := 0; i < c.NumField(); i++ {
		leaves(yamlName(c.Field(i)), c.Field(i).Type)
	}
	for _, f := range fields {
		if !slices.Contains(named, f) {
			t.Errorf("the example does not name %s", f)
		}
	}
	for _, n := range named {
		if !slices.Contains(fields, n) {
			t.Errorf("the example names %s, which is no setting", n)
		}
	}
	if len(named) != len(fields) {
		t.Errorf("the example names %d settings (some twice?), Config has %d", len(named), len(fields))
	}
}
