package config

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// applyEnv overlays REGISTRYD_<SECTION>_<KEY> variables onto cfg. The names come
// from the yaml tags, so a new field is configurable from the environment the
// moment it exists. Unknown REGISTRYD_ variables are reported, not ignored: a
// typo in a deployment should not silently fall back to a default. Each
// setting a variable sets is recorded in origin (when not nil) under its
// name ("proxy.listen") as the variable's name.
func applyEnv(cfg *Config, environ []string, origin map[string]string) error {
	fields := envFields(cfg)
	keys := envKeys(cfg)
	var p Problems
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "REGISTRYD_") {
			continue
		}
		f, known := fields[name]
		if !known {
			if name == "REGISTRYD_CONFIG" {
				continue
			}
			hint := ""
			if best := closest(name, keysOf(fields)); best != "" {
				hint = " (did you mean " + best + "?)"
			}
			p = append(p, fmt.Sprintf("%s is not a known setting%s", name, hint))
			continue
		}
		if err := setValue(f, value); err != nil {
			p = append(p, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if origin != nil {
			origin[keys[name]] = name
		}
	}
	if len(p) > 0 {
		return p
	}
	return nil
}

func envFields(cfg *Config) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	root := reflect.ValueOf(cfg).Elem()
	for i := 0; i < root.NumField(); i++ {
		addEnvFields(out, "REGISTRYD_"+strings.ToUpper(yamlName(root.Type().Field(i))), root.Field(i))
	}
	return out
}

// addEnvFields names every setting of the section sv under prefix; a
// subsection (store.postgres) adds its name to the prefix:
// REGISTRYD_STORE_POSTGRES_DSN.
func addEnvFields(out map[string]reflect.Value, prefix string, sv reflect.Value) {
	for j := 0; j < sv.NumField(); j++ {
		name := prefix + "_" + strings.ToUpper(yamlName(sv.Type().Field(j)))
		if isSubsection(sv.Field(j)) {
			addEnvFields(out, name, sv.Field(j))
			continue
		}
		out[name] = sv.Field(j)
	}
}

// envKeys maps each variable's name to its setting's name:
// REGISTRYD_STORE_POSTGRES_DSN -> store.postgres.dsn.
func envKeys(cfg *Config) map[string]string {
	out := map[string]string{}
	var add func(env, key string, sv reflect.Value)
	add = func(env, key string, sv reflect.Value) {
		for j := 0; j < sv.NumField(); j++ {
			name := yamlName(sv.Type().Field(j))
			e, k := env+"_"+strings.ToUpper(name), key+"."+name
			if isSubsection(sv.Field(j)) {
				add(e, k, sv.Field(j))
				continue
			}
			out[e] = k
		}
	}
	root := reflect.ValueOf(cfg).Elem()
	for i := 0; i < root.NumField(); i++ {
		name := yamlName(root.Type().Field(i))
		add("REGISTRYD_"+strings.ToUpper(name), name, root.Field(i))
	}
	return out
}

// isSubsection reports whether a setting's field is a group of settings of
// its own (a struct) rather than one value.
func isSubsection(f reflect.Value) bool { return f.Kind() == reflect.Struct }

func keysOf(m map[string]reflect.Value) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	byteSizeType = reflect.TypeOf(ByteSize(0))
)

// setValue parses the value s of an environment variable into f. It is read
// as the same text would be in the YAML file (setNode), so that a value
// means the same in both places.
func setValue(f reflect.Value, s string) error {
	return setNode(f, &yaml.Node{Kind: yaml.ScalarNode, Value: s})
}

// setNode parses the scalar n into f: a duration or a size by their own
// parsers, a string as written, a boolean or a number first as yaml.v3 reads
// it into a field of that type, then by strconv.
//
// yaml.v3 comes first because the file was once decoded by it into this
// struct, and every file that loaded then must load the same now: it reads
// y/yes/on and n/no/off (in lower, Title and upper case) as booleans, and
// 0x10, 0o17, 017 (octal), 1_000, 1e3 and 500.0 (truncated, as it did) as
// integers. strconv comes second for what the walk and the environment
// accepted besides (1/t/0/f, a quoted number, inf), and for the message.
func setNode(f reflect.Value, n *yaml.Node) error {
	s := n.Value
	switch f.Type() {
	case durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 30s or 5m)", s)
		}
		f.SetInt(int64(d))
		return nil
	case byteSizeType:
		b, err := ParseByteSize(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(b))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
		return nil
	case reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		if decodeAsYAML(f, n) {
			return nil
		}
	}
	switch f.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		f.SetInt(i)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		f.SetFloat(x)
	default:
		return fmt.Errorf("unsupported setting type %s", f.Type())
	}
	return nil
}

// decodeAsYAML sets f to the scalar n as yaml.v3 decodes it into a value of
// f's type, and reports whether it could. A null (an empty environment
// variable, "~") is not a value: yaml.v3 would leave the field as it was,
// and the caller's parser says what is wrong.
func decodeAsYAML(f reflect.Value, n *yaml.Node) bool {
	p := reflect.New(reflect.PointerTo(f.Type())) // **T: nil after a null
	if err := n.Decode(p.Interface()); err != nil || p.Elem().IsNil() {
		return false
	}
	f.Set(p.Elem().Elem())
	return true
}

// DecodeKey decodes a 32-byte key given as hex or standard/URL-safe base64.
func DecodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, fmt.Errorf("must be 32 bytes, hex or base64 encoded")
}
