package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestGetAnswerStatus: only 200 and 203 (and 304 to a conditional GET) are
// usable; other 2xx are *AnswerError, which is neither unavailable nor not
// found; Head keeps accepting any 2xx (the connection test relies on it).
func TestGetAnswerStatus(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.Trim(r.URL.Path, "/"))
		w.WriteHeader(code)
		if code != http.StatusNoContent && code != http.StatusNotModified {
			w.Write([]byte("body"))
		}
	}))
	tests := []struct {
		code   int
		etag   string
		reason string // "" for a usable answer
	}{
		{code: 200},
		{code: 203},
		{code: 304, etag: `"v1"`},
		{code: 201, reason: "answered 201 Created"},
		{code: 202, reason: "answered 202 Accepted"},
		{code: 204, reason: "answered 204 No Content"},
		{code: 206, reason: "answered 206 Partial Content to a request without Range"},
		{code: 226, reason: "answered 226 IM Used"},
		{code: 299, reason: "answered 299 status code 299"}, // the phrase Go's server sends
		{code: 304, reason: "answered 304 Not Modified to a request without If-None-Match"},
	}
	c := local(Options{})
	ep := Endpoint{URL: srv.URL, Username: "u", Password: "hunter2-secret"}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.code)+tt.etag, func(t *testing.T) {
			resp, err := c.Get(context.Background(), ep, strconv.Itoa(tt.code), tt.etag)
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil || resp.Status != tt.code {
					t.Fatalf("status %d, read %q, %v", resp.Status, b, err)
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatalf("Get succeeded with %d", resp.Status)
			}
			var ae *AnswerError
			if !errors.As(err, &ae) || ae.Reason != tt.reason || ae.Op != "GET" {
				t.Fatalf("err = %#v; want *AnswerError %q", err, tt.reason)
			}
			if !errors.Is(err, ErrBadAnswer) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v: want ErrBadAnswer only", err)
			}
			want := "upstream GET " + srv.URL + "/" + strconv.Itoa(tt.code) + ": " + tt.reason
			if err.Error() != want {
				t.Fatalf("Error() = %q; want %q", err.Error(), want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
	for _, code := range []int{200, 201, 204, 206} {
		resp, err := c.Head(context.Background(), ep, strconv.Itoa(code))
		if err != nil || resp.Status != code {
			t.Fatalf("Head %d: %v", code, err)
		}
	}
}

// TestBadAnswerKeepsConnection: refusing an answer drains it, so the
// connection is reused for the next request.
func TestBadAnswerKeepsConnection(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Encoding", "br")
		w.Write([]byte("compressed"))
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := local(Options{})
	for _, p := range []string{"204", "br", "204"} {
		if _, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, p, ""); !errors.Is(err, ErrBadAnswer) {
			t.Fatalf("%s: err = %v", p, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("server saw %d connections; want 1", n)
	}
}
