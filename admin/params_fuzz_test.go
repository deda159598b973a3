package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// want4xx fails unless err is an *httpError with a 4xx status and a GitLab
// envelope that encodes as JSON.
func want4xx(t *testing.T, err error) *httpError {
	t.Helper()
	var he *httpError
	if !errors.As(err, &he) {
		t.Fatalf("err = %v (%T), want *httpError", err, err)
	}
	if he.status < 400 || he.status > 499 {
		t.Fatalf("status %d for %v, want 4xx", he.status, err)
	}
	raw, jerr := json.Marshal(he.body)
	if jerr != nil {
		t.Fatalf("error body does not encode: %v", jerr)
	}
	var env map[string]any
	if json.Unmarshal(raw, &env) != nil || (env["message"] == nil && env["error"] == nil) {
		t.Fatalf("error body %s is not a GitLab envelope", raw)
	}
	return he
}

// exercise calls every getter on every parameter name present and on the
// names the handlers use, as a handler would, and checks that whatever it
// records is a 400 parameter error.
func exercise(t *testing.T, p *params) {
	t.Helper()
	names := []string{"name", "url", "position", "registry_id", "username", "password", "scopes", "expires_at",
		"page", "per_page", "admin", "visibility"}
	for k := range p.values {
		names = append(names, k)
	}
	for i, n := range names {
		switch i % 6 {
		case 0:
			p.str(n)
		case 1:
			p.integer(n)
		case 2:
			p.boolean(n)
		case 3:
			p.strings(n)
		case 4:
			p.date(n)
		case 5:
			p.has(n)
		}
	}
	p.required("name")
	p.oneOf("visibility", "private", "internal", "public")
	pg := p.page()
	if pg.Page < 1 || pg.PerPage < 1 || pg.PerPage > maxPerPage || pg.Offset() < 0 {
		t.Fatalf("page %+v out of range", pg)
	}
	p.credentials()
	if err := p.err(); err != nil {
		he := want4xx(t, err)
		if he.status != http.StatusBadRequest {
			t.Fatalf("parameter error with status %d", he.status)
		}
		if _, ok := he.body.(map[string]any)["error"].(string); !ok {
			t.Fatalf("parameter error body %v, want {\"error\": ...}", he.body)
		}
	}
}

// FuzzDecodeParams feeds arbitrary content types, bodies, query strings and
// path ids to the request decoding: it must never panic, and every failure
// must be a 4xx in GitLab's envelope.
func FuzzDecodeParams(f *testing.F) {
	seeds := []struct{ ct, body, query string }{
		{"application/json", `{"name":"main","description":"d"}`, ""},
		{"application/json", `{"position":3}`, "page=2&per_page=50"},
		{"application/json", `{"position":"3"}`, ""},
		{"application/json", `{"position":3.0,"registry_id":1e3}`, ""},
		{"application/json", `{"position":1.5,"upstream_id":-1}`, ""},
		{"application/json", `{"position":99999999999999999999999}`, ""},
		{"application/json", `{"scopes":["api","read_api"],"expires_at":"2030-01-02"}`, ""},
		{"application/json", `{"scopes":"api, read_api","admin":"true"}`, ""},
		{"application/json", `{"scopes":[1,2],"admin":"perhaps","name":{"a":1}}`, ""},
		{"application/json", `{"username":"u"}`, ""},
		{"application/json", `{"name":null,"url":["x"]}`, ""},
		{"application/json", `null`, ""},
		{"application/json", `[1,2,3]`, ""},
		{"application/json", `"just a string"`, ""},
		{"application/json", `{"a":1}{"b":2}`, ""},
		{"application/json", `{"a":`, ""},
		{"application/json", "\xff\xfe{}", ""},
		{"application/json", `{"name":"\u0000"}`, "name=q&name=r"},
		{"", `{"name":"x"}`, "per_page=0"},
		{"text/plain", `{"name":"x"}`, "page=-1"},
		{"application/x-www-form-urlencoded", "name=main&description=d", ""},
		{"application/x-www-form-urlencoded", "scopes[]=api&scopes[]=read_api&position=2", ""},
		{"application/x-www-form-urlencoded", "name=%zz", ""},
		{"application/x-www-form-urlencoded", "a=1;b=2", "page=abc&per_page=1000"},
		{"application/json", `{"expires_at":"2030-13-45","page":"2","per_page":"0"}`, ""},
	}
	for _, s := range seeds {
		f.Add(s.ct, []byte(s.body), s.query, "12")
	}
	f.Add("application/json", []byte(`{}`), "", "abc")
	f.Add("application/json", []byte(`{}`), "", "-3")
	f.Add("application/json", []byte(`{}`), "", "99999999999999999999")

	f.Fuzz(func(t *testing.T, contentType string, body []byte, query, pathValue string) {
		// decodeBody on its own.
		values := map[string]any{}
		if err := decodeBody(values, contentType, body); err != nil {
			want4xx(t, err)
		} else {
			exercise(t, &params{values: values})
		}

		// The whole of readParams, behind the same body limit the server sets.
		rec := httptest.NewRecorder()
		r := &http.Request{
			Method: http.MethodPost,
			URL:    &url.URL{Path: "/api/v4/x", RawQuery: query},
			Header: http.Header{"Content-Type": {contentType}},
			Body:   http.MaxBytesReader(rec, io.NopCloser(bytes.NewReader(body)), 512),
		}
		r.SetPathValue("id", pathValue)
		if id, err := pathID(r, "id"); err != nil {
			want4xx(t, err)
		} else if id < 1 {
			t.Fatalf("pathID(%q) = %d", pathValue, id)
		}
		p, err := readParams(r)
		if err != nil {
			he := want4xx(t, err)
			if (len(body) > 512) != (he.status == http.StatusRequestEntityTooLarge) {
				t.Fatalf("%d-byte body: status %d (413 is for bodies over the limit, and only for them)", len(body), he.status)
			}
			return
		}
		if len(body) > 512 {
			t.Fatalf("a %d-byte body passed a 512-byte limit", len(body))
		}
		exercise(t, p)
	})
}
