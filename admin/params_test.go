package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// jsonParams decodes body as a JSON request would be.
func jsonParams(t *testing.T, body string) *params {
	t.Helper()
	values := map[string]any{}
	if err := decodeBody(values, "application/json", []byte(body)); err != nil {
		t.Fatalf("decodeBody(%s): %v", body, err)
	}
	return &params{values: values}
}

func TestParamGetters(t *testing.T) {
	tests := []struct {
		name string
		body string
		get  func(p *params) any
		want string // fmt of the value
		errs string // the 400 error text, "" for none
	}{
		{"integer", `{"n":3}`, func(p *params) any { return *p.integer("n") }, "3", ""},
		{"integer as a string", `{"n":" 7 "}`, func(p *params) any { return *p.integer("n") }, "7", ""},
		{"integer spelt 3.0", `{"n":3.0}`, func(p *params) any { return *p.integer("n") }, "3", ""},
		{"fractional integer", `{"n":1.5}`, func(p *params) any { return p.integer("n") }, "<nil>", "n is invalid"},
		{"huge integer", `{"n":99999999999}`, func(p *params) any { return p.integer("n") }, "<nil>", "n is invalid"},
		{"integer from a bool", `{"n":true}`, func(p *params) any { return p.integer("n") }, "<nil>", "n is invalid"},
		{"absent integer", `{}`, func(p *params) any { return p.integer("n") }, "<nil>", ""},
		{"null integer", `{"n":null}`, func(p *params) any { return p.integer("n") }, "<nil>", ""},
		{"string", `{"s":"x"}`, func(p *params) any { return *p.str("s") }, "x", ""},
		{"string from a number", `{"s":12}`, func(p *params) any { return *p.str("s") }, "12", ""},
		{"string from an object", `{"s":{"a":1}}`, func(p *params) any { return p.str("s") }, "<nil>", "s is invalid"},
		{"string from an array", `{"s":["a"]}`, func(p *params) any { return p.str("s") }, "<nil>", "s is invalid"},
		{"required missing", `{}`, func(p *params) any { return p.required("name") }, "", "name is missing"},
		{"required blank", `{"name":"  "}`, func(p *params) any { return p.required("name") }, "  ", "name is empty"},
		{"required null", `{"name":null}`, func(p *params) any { return p.required("name") }, "", "name is missing"},
		{"boolean", `{"b":true}`, func(p *params) any { return *p.boolean("b") }, "true", ""},
		{"boolean as a string", `{"b":"false"}`, func(p *params) any { return *p.boolean("b") }, "false", ""},
		{"boolean nonsense", `{"b":"perhaps"}`, func(p *params) any { return p.boolean("b") }, "<nil>", "b is invalid"},
		{"strings array", `{"s":["api"," read_api"]}`, func(p *params) any { return p.strings("s") }, "[api read_api]", ""},
		{"strings comma list", `{"s":"api, read_api,"}`, func(p *params) any { return p.strings("s") }, "[api read_api]", ""},
		{"strings with a number", `{"s":["api",1]}`, func(p *params) any { return p.strings("s") }, "[]", "s is invalid"},
		{"date", `{"d":"2030-01-02"}`, func(p *params) any { return p.date("d").Format(time.RFC3339) }, "2030-01-02T00:00:00Z", ""},
		{"bad date", `{"d":"2030-13-45"}`, func(p *params) any { return p.date("d") }, "<nil>", "d is invalid"},
		{"one of", `{"v":"public"}`, func(p *params) any { return *p.oneOf("v", "private", "public") }, "public", ""},
		{"not one of", `{"v":"secret"}`, func(p *params) any { return p.oneOf("v", "private", "public") }, "<nil>", "v does not have a valid value"},
		{"credentials together", `{"username":"u","password":"p"}`, func(p *params) any { u, pw := p.credentials(); return *u + ":" + *pw }, "u:p", ""},
		{"username alone", `{"username":"u"}`, func(p *params) any { _, pw := p.credentials(); return pw }, "<nil>", "username, password provide all or none of parameters"},
		{"page defaults", `{}`, func(p *params) any { return p.page() }, "{1 20}", ""},
		{"per_page clamped", `{"page":"3","per_page":1000}`, func(p *params) any { return p.page() }, "{3 100}", ""},
		{"per_page zero", `{"per_page":0}`, func(p *params) any { return p.page() }, "{1 20}", "per_page does not have a valid value"},
		{"page zero and per_page bad", `{"page":0,"per_page":"x"}`, func(p *params) any { return p.page() }, "{1 20}", "page does not have a valid value, per_page is invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := jsonParams(t, tc.body)
			got := tc.get(p)
			// Getters that succeed are dereferenced above, so values print plainly.
			if s := fmt.Sprint(got); s != tc.want {
				t.Fatalf("value = %s, want %s", s, tc.want)
			}
			err := p.err()
			switch {
			case tc.errs == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.errs != "":
				he := want4xx(t, err)
				if msg := he.body.(map[string]any)["error"]; msg != tc.errs {
					t.Fatalf("error %q, want %q", msg, tc.errs)
				}
			}
		})
	}
}

func TestDecodeBody(t *testing.T) {
	tests := []struct {
		name, ct, body string
		want           string // JSON of the merged values, or the error message
		status         int
	}{
		{"json object", "application/json", `{"a":"1","b":2}`, `{"a":"1","b":2}`, 0},
		{"json with charset and no content type", "", `{"a":true}`, `{"a":true}`, 0},
		{"form", "application/x-www-form-urlencoded", "a=1&s[]=x&s[]=y", `{"a":"1","s":["x","y"]}`, 0},
		{"json null", "application/json", `null`, `{}`, 0},
		{"json array", "application/json", `[1]`, "400 Bad request - the request body is not a valid JSON object", 400},
		{"truncated json", "application/json", `{"a":`, "400 Bad request - the request body is not a valid JSON object", 400},
		{"two objects", "application/json", `{}{}`, "400 Bad request - the request body has data after the JSON object", 400},
		{"bad form escape", "application/x-www-form-urlencoded", "a=%zz", "400 Bad request - the form body is malformed", 400},
		{"too many keys", "application/json", manyKeys(maxParams + 1), "400 Bad request - too many parameters", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			err := decodeBody(values, tc.ct, []byte(tc.body))
			if tc.status != 0 {
				he := want4xx(t, err)
				if he.status != tc.status || he.body.(map[string]any)["message"] != tc.want {
					t.Fatalf("error %d %v, want %d %q", he.status, he.body, tc.status, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(values)
			if string(raw) != tc.want {
				t.Fatalf("values %s, want %s", raw, tc.want)
			}
		})
	}
}

func manyKeys(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":1`, i)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestPathID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"1", 1, true}, {"42", 42, true}, {"0", 0, false}, {"-1", 0, false}, {"abc", 0, false}, {"1.0", 0, false},
		{"99999999999999999999", 0, false}, {"", 0, false}} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetPathValue("id", tc.in)
		got, err := pathID(r, "id")
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("pathID(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil {
			if he := want4xx(t, err); he.body.(map[string]any)["error"] != "id is invalid" {
				t.Errorf("pathID(%q) error body %v", tc.in, he.body)
			}
		}
	}
}
