package proxy

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/valyala/fasthttp"
)

// problemType is RFC 9457's media type.
const problemType = "application/problem+json"

// wantsProblem reports whether an Accept header lists
// application/problem+json (any parameters, any case).
func wantsProblem(accept []byte) bool {
	if len(accept) == 0 {
		return false
	}
	return bytes.Contains(bytes.ToLower(accept), []byte(problemType))
}

// problemDoc is an RFC 9457 problem document. type is left "about:blank":
// the status says what kind of problem it is, and title is the status's
// phrase, as RFC 9457 asks for that type. detail is GitLab's message;
// upstreams, an extension member, lists what each upstream of a miss said.
type problemDoc struct {
	Type      string            `json:"type"`
	Title     string            `json:"title"`
	Status    int               `json:"status"`
	Detail    string            `json:"detail,omitempty"`
	Upstreams []problemUpstream `json:"upstreams,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
}

type problemUpstream struct {
	ID     int64  `json:"id"`
	Result string `json:"result"` // not_found, denied, failed, unhealthy
	Reason string `json:"reason"`
	// Rule is the id of the deny rule that refused the file (result
	// denied), or of the regex rule that was not evaluated and refused it
	// (maven.Verdict.Unevaluated); absent when an allow list did not match.
	Rule int64 `json:"rule,omitempty"`
}

// problem renders ae (the answer to err) as a problem document.
func problem(ae *apiError, err error) string {
	d := problemDoc{Type: "about:blank", Title: fasthttp.StatusMessage(ae.status), Status: ae.status}
	var body map[string]any
	if json.Unmarshal([]byte(ae.body), &body) == nil {
		for _, k := range []string{"message", "error_description", "error"} {
			if v, ok := body[k].(string); ok {
				d.Detail = v
				break
			}
		}
		if id, ok := body["request_id"].(string); ok {
			d.RequestID = id
		}
	}
	var miss *missError
	if errors.As(err, &miss) {
		for _, f := range miss.failures {
			res := "failed"
			var ue *unavailableError
			switch {
			case isAbsent(f.err):
				res = "not_found"
			case isDenied(f.err):
				res = "denied"
			case errors.As(f.err, &ue):
				res = "unhealthy"
			}
			pu := problemUpstream{ID: f.upstream, Result: res, Reason: failureReason(f.err)}
			if de, ok := f.err.(*deniedError); ok && de.v.Rule != nil {
				pu.Rule = de.v.Rule.ID
			}
			d.Upstreams = append(d.Upstreams, pu)
		}
	}
	raw, _ := json.Marshal(d)
	return string(raw)
}
