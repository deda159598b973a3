package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// params are a request's parameters, merged as GitLab (Grape) merges them:
// query string, then a JSON or form body on top. Getters record every problem
// so that one 400 lists them all, as Grape does.
type params struct {
	values map[string]any
	errs   []string
}

// maxParams bounds how many keys a body may carry; nobody needs more.
const maxParams = 256

// readParams decodes the query and the body of r. A body that is not valid
// JSON (or form) is a 400; a body over the limit is a 413 (the limit is set by
// the server's MaxBytesReader).
func readParams(r *http.Request) (*params, error) {
	p := &params{values: map[string]any{}}
	for k, v := range r.URL.Query() {
		if len(v) == 1 && !strings.HasSuffix(k, "[]") {
			p.values[k] = v[0]
		} else {
			p.values[strings.TrimSuffix(k, "[]")] = anySlice(v)
		}
	}
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return p, nil
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errTooLarge
		}
		return nil, badRequest("could not read the request body")
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return p, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err := decodeBody(p.values, ct, raw); err != nil {
		return nil, err
	}
	return p, nil
}

// decodeBody merges a JSON object (any content type but form) or a form body into values.
func decodeBody(values map[string]any, contentType string, raw []byte) error {
	if contentType == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(raw))
		if err != nil {
			return badRequest("the form body is malformed")
		}
		if len(form) > maxParams {
			return badRequest("too many parameters")
		}
		for k, v := range form {
			if len(v) == 1 && !strings.HasSuffix(k, "[]") {
				values[k] = v[0]
			} else {
				values[strings.TrimSuffix(k, "[]")] = anySlice(v)
			}
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var body map[string]any
	if err := dec.Decode(&body); err != nil {
		return badRequest("the request body is not a valid JSON object")
	}
	if dec.More() {
		return badRequest("the request body has data after the JSON object")
	}
	if len(body) > maxParams {
		return badRequest("too many parameters")
	}
	for k, v := range body {
		values[k] = v
	}
	return nil
}

func anySlice(v []string) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = s
	}
	return out
}

func (p *params) fail(msg string) { p.errs = append(p.errs, msg) }

// err is every recorded problem as one GitLab parameter error.
func (p *params) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return paramError(strings.Join(p.errs, ", "))
}

func (p *params) has(name string) bool {
	v, ok := p.values[name]
	return ok && v != nil
}

// str returns an optional string parameter (nil when absent). Numbers and
// booleans are accepted in their text form, as Grape coerces them.
func (p *params) str(name string) *string {
	v, ok := p.values[name]
	if !ok || v == nil {
		return nil
	}
	switch t := v.(type) {
	case string:
		return &t
	case json.Number:
		s := t.String()
		return &s
	case bool:
		s := strconv.FormatBool(t)
		return &s
	}
	p.fail(name + " is invalid")
	return nil
}

// required returns a required, non-blank string parameter.
func (p *params) required(name string) string {
	if !p.has(name) {
		p.fail(name + " is missing")
		return ""
	}
	s := p.str(name)
	if s == nil {
		return ""
	}
	if strings.TrimSpace(*s) == "" {
		p.fail(name + " is empty")
	}
	return *s
}

// integer returns an optional integer parameter.
func (p *params) integer(name string) *int {
	v, ok := p.values[name]
	if !ok || v == nil {
		return nil
	}
	var s string
	switch t := v.(type) {
	case string:
		s = strings.TrimSpace(t)
	case json.Number:
		s = t.String()
	default:
		p.fail(name + " is invalid")
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// JSON may spell an integer as 3.0; anything fractional is invalid.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			p.fail(name + " is invalid")
			return nil
		}
		n = int64(f)
	}
	if n > math.MaxInt32 || n < math.MinInt32 {
		p.fail(name + " is invalid")
		return nil
	}
	i := int(n)
	return &i
}

// boolean returns an optional boolean parameter.
func (p *params) boolean(name string) *bool {
	v, ok := p.values[name]
	if !ok || v == nil {
		return nil
	}
	switch t := v.(type) {
	case bool:
		return &t
	case string:
		if b, err := strconv.ParseBool(t); err == nil {
			return &b
		}
	}
	p.fail(name + " is invalid")
	return nil
}

// strings returns an optional array of strings; a comma-separated string is
// accepted too.
func (p *params) strings(name string) []string {
	v, ok := p.values[name]
	if !ok || v == nil {
		return nil
	}
	var out []string
	switch t := v.(type) {
	case string:
		for _, s := range strings.Split(t, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	case []any:
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				p.fail(name + " is invalid")
				return nil
			}
			out = append(out, strings.TrimSpace(s))
		}
	default:
		p.fail(name + " is invalid")
	}
	return out
}

// date returns an optional date parameter (a day, read as GitLab's Date
// reads it: see parseDate) as midnight UTC of that day. Blank is absent, as
// Grape takes "" for a Date.
func (p *params) date(name string) *time.Time {
	s := p.str(name)
	if s == nil || strings.TrimSpace(*s) == "" {
		return nil
	}
	if t, ok := parseDate(*s); ok {
		return &t
	}
	p.fail(name + " is invalid")
	return nil
}

// oneOf checks an optional string against allowed values.
func (p *params) oneOf(name string, allowed ...string) *string {
	s := p.str(name)
	if s == nil {
		return nil
	}
	for _, a := range allowed {
		if *s == a {
			return s
		}
	}
	p.fail(name + " does not have a valid value")
	return nil
}

// deref is *p, or the zero value when p is nil: an optional parameter that
// defaults to its zero value.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// pathID parses an integer path parameter; anything else is a 400.
func pathID(r *http.Request, name string) (int64, error) {
	v := r.PathValue(name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, paramError(name + " is invalid")
	}
	return id, nil
}

// dateTime returns an optional ISO 8601 parameter as a UTC time: a date
// (midnight UTC, as Grape's DateTime reads it) or a date and time, with a
// zone or without one (UTC).
func (p *params) dateTime(name string) *time.Time {
	s := p.str(name)
	if s == nil || strings.TrimSpace(*s) == "" {
		return nil
	}
	v := strings.TrimSpace(*s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			t = t.UTC()
			return &t
		}
	}
	p.fail(name + " is invalid")
	return nil
}
