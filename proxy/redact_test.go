package proxy

import (
	"bufio"
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

const secret = "rdpat-very-secret-token-0123456789"

func TestRedactRequest(t *testing.T) {
	cases := []string{
		`contents: "GET / HTTP/1.1\r\nPrivate-Token: ` + secret + `\r\n"`,
		"PRIVATE-TOKEN: " + secret + "\r\nHost: x",
		`"Authorization: Basic ` + secret + `\r\n"`,
		"Authorization:Bearer " + secret,
		"GET /api/v4/x?private_token=" + secret + "&a=b HTTP/1.1",
		"deploy-token: " + secret,
		"Svc-Gateway-Api-Request: " + secret,
		"Cookie: s=" + secret,
		"İstanbul Private-Token: " + secret, // non-ASCII before the mark
	}
	for _, c := range cases {
		got := redactRequest(c)
		if strings.Contains(got, secret) || strings.Contains(got, secret[6:]) {
			t.Errorf("redactRequest(%q) = %q: the token is still there", c, got)
		}
		if !strings.Contains(got, "[redacted]") {
			t.Errorf("redactRequest(%q) = %q: nothing marked", c, got)
		}
	}
	if got := redactRequest("timeout reading request from 127.0.0.1:5000"); got != "timeout reading request from 127.0.0.1:5000" {
		t.Errorf("a line without secrets changed: %q", got)
	}
}

func FuzzRedactRequest(f *testing.F) {
	f.Add("Private-Token: " + secret)
	f.Fuzz(func(t *testing.T, s string) {
		redactRequest(s) // must not panic on any input
	})
}

// TestFasthttpErrorLinesRedacted feeds fasthttp's own error text for a
// request it cannot parse (it quotes the request, headers included) through
// the logger the proxy gives fasthttp, at debug level.
func TestFasthttpErrorLinesRedacted(t *testing.T) {
	raw := "GET /api/v4/virtual_registries/packages/maven/1/a.jar?private_token=" + secret + " HTTP/1.1\r\n" +
		"Host: x\r\nPrivate-Token: " + secret + "\r\nAuthorization: Basic " + secret + "\r\n" +
		"Content-Length: not-a-number\r\n\r\n"
	var req fasthttp.Request
	err := req.Read(bufio.NewReader(strings.NewReader(raw)))
	if err == nil {
		t.Fatal("fasthttp parsed a request with a bad Content-Length")
	}
	if !strings.Contains(err.Error(), secret) {
		t.Logf("fasthttp's error no longer quotes the request: %v", err)
	}
	var out bytes.Buffer
	l := fasthttpLogger{slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Printf("error when serving connection %q<->%q: %v", "127.0.0.1:8080", "127.0.0.1:5000", err)
	if out.Len() == 0 {
		t.Fatal("nothing logged at debug level")
	}
	if strings.Contains(out.String(), secret) {
		t.Fatalf("the log line carries the token: %s", out.String())
	}
}
