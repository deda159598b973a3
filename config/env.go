package config

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// applyEnv overlays REGISTRYD_<SECTION>_<KEY> variables onto cfg. The names come
// from the yaml tags, so a new field is configurable from the environment the
// moment it exists. Unknown REGISTRYD_ variables are reported, not ignored: a
// typo in a deployment should not silently fall back to a default.
func applyEnv(cfg *Config, environ []string) error {
	fields := envFields(cfg)
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
		section := yamlName(root.Type().Field(i))
		sv := root.Field(i)
		for j := 0; j < sv.NumField(); j++ {
			key := yamlName(sv.Type().Field(j))
			out["REGISTRYD_"+strings.ToUpper(section)+"_"+strings.ToUpper(key)] = sv.Field(j)
		}
	}
	return out
}

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

func setValue(f reflect.Value, s string) error {
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
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		f.SetInt(n)
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
