package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"registryd/eventimport"
	"registryd/sbom"
	"registryd/store"
)

// TestToHTTP is the one mapping from domain errors to answers.
func TestToHTTP(t *testing.T) {
	ve := &store.ValidationError{}
	ve.Add("url", "must be a valid URL")
	tests := []struct {
		name   string
		err    error
		status int
		body   string
	}{
		{"named resource", &store.NotFoundError{Resource: "Group"}, 404, `{"message":"404 Group Not Found"}`},
		{"upstream", &store.NotFoundError{Resource: "Upstream"}, 404, `{"message":"404 Upstream Not Found"}`},
		{"record by id", &store.NotFoundError{Resource: "Registry"}, 404, `{"message":"404 Not found"}`},
		{"wrapped not found", fmt.Errorf("looking: %w", &store.NotFoundError{Resource: "User"}), 404, `{"message":"404 User Not Found"}`},
		{"validation", ve, 400, `{"message":{"url":["must be a valid URL"]}}`},
		{"not top level", store.ErrNotTopLevel, 400, `{"message":"400 Bad request - only available on top-level groups."}`},
		{"precondition", store.ErrPreconditionFailed, 412, `{"message":"412 Precondition Failed"}`},
		{"conflict", &store.ConflictError{Reason: "Member already exists"}, 409, `{"message":"Member already exists"}`},
		{"body too large", &http.MaxBytesError{Limit: 10}, 413, `{"message":"413 Request Entity Too Large"}`},
		{"parameter error", paramError("name is missing"), 400, `{"error":"name is missing"}`},
		{"unreadable SBOM", &sbom.Error{Reason: "the SBOM has no specVersion"}, 400,
			`{"message":"400 Bad request - the SBOM has no specVersion"}`},
		{"SBOM over the limit", &sbom.Error{Reason: "the body could not be read", Err: &http.MaxBytesError{Limit: 10}}, 413,
			`{"message":"413 Request Entity Too Large"}`},
		{"unreadable events", &eventimport.Error{Reason: "the body holds no events"}, 400,
			`{"message":"400 Bad request - the body holds no events"}`},
		{"events over the limit", &eventimport.Error{Reason: "the body could not be read", Err: &http.MaxBytesError{Limit: 10}}, 413,
			`{"message":"413 Request Entity Too Large"}`},
		{"wrapped http error", fmt.Errorf("x: %w", errForbidden), 403, `{"message":"403 Forbidden"}`},
		// bbolt returns a commit's write error as is: a *PathError.
		{"index commit on a full volume", fmt.Errorf("store: %w", &fs.PathError{Op: "write", Path: "registry.db", Err: syscall.ENOSPC}),
			507, `{"message":"507 Insufficient Storage - the data volume is full"}`},
		{"quota", syscall.EDQUOT, 507, `{"message":"507 Insufficient Storage - the data volume is full"}`},
		{"cleanup run now too soon", fmt.Errorf("x: %w", &store.CleanupTooSoonError{Interval: 90 * time.Second, RetryAfter: 1500 * time.Millisecond}),
			429, `{"message":"429 Too Many Requests - the cleanup policy's last run started less than 1m30s ago; retry after 2 seconds"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			he := toHTTP(tc.err)
			if he == nil {
				t.Fatalf("%v is not mapped", tc.err)
			}
			raw, err := json.Marshal(he.body)
			if err != nil {
				t.Fatal(err)
			}
			if he.status != tc.status || string(raw) != tc.body {
				t.Fatalf("%d %s, want %d %s", he.status, raw, tc.status, tc.body)
			}
		})
	}
	if he := toHTTP(&store.CleanupTooSoonError{Interval: time.Hour, RetryAfter: time.Millisecond}); he.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After of 1ms: %q", he.header.Get("Retry-After"))
	}
	if got := shortDuration(time.Hour); got != "1h" {
		t.Fatalf("shortDuration(1h) = %q", got)
	}
	if he := toHTTP(errors.New("disk on fire")); he != nil {
		t.Fatalf("an unexpected error mapped to %d", he.status)
	}
}

// TestUnexpectedErrorsAnswer500 checks that a 500, from an error or a panic,
// carries a request id and never the error's text, which goes to the log
// line with the same id.
func TestUnexpectedErrorsAnswer500(t *testing.T) {
	const secret = "dial tcp 10.0.0.1: password=hunter2"
	for _, tc := range []struct {
		name string
		h    handler
	}{
		{"error", func(http.ResponseWriter, *http.Request) error { return errors.New(secret) }},
		{"panic", func(http.ResponseWriter, *http.Request) error { panic(secret) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := &Server{log: slog.New(slog.NewJSONHandler(&logs, nil)), opts: Options{}.withDefaults()}
			var err error
			if s.met, err = newMetrics(nil); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			s.wrap("test", tc.h).ServeHTTP(rec, httptest.NewRequest("GET", "/api/v4/x", nil))
			if rec.Code != 500 {
				t.Fatalf("status %d", rec.Code)
			}
			var body map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			id := rec.Header().Get("X-Request-Id")
			if body["message"] != "500 Internal Server Error" || body["request_id"] != id || id == "" {
				t.Fatalf("body %v, request id %q", body, id)
			}
			if strings.Contains(rec.Body.String(), "hunter2") {
				t.Fatal("the 500 body carries the error text")
			}
			if !strings.Contains(logs.String(), id) || !strings.Contains(logs.String(), "hunter2") {
				t.Fatalf("the log line lacks the request id or the error: %s", logs.String())
			}
			// A panic's line has the stack where it happened.
			if tc.name == "panic" && (!strings.Contains(logs.String(), `"stack":"goroutine`) ||
				!strings.Contains(logs.String(), "TestUnexpectedErrorsAnswer500")) {
				t.Fatalf("the log line of a panic lacks its stack: %s", logs.String())
			}
		})
	}
}
