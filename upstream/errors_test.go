package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	tests := []struct {
		name   string
		err    error
		kind   error
		reason string
	}{
		{"redirects", fmt.Errorf("x: %w", ErrTooManyRedirects), ErrTooManyRedirects, "Too many redirects"},
		{"blocked", &net.OpError{Op: "dial", Err: &URLError{Reason: ReasonLocalNetwork}}, ErrBlocked, ReasonLocalNetwork},
		{"redirect not http", &URLError{Reason: ReasonInvalid}, ErrBlocked, "Redirected to a URL that is not http(s)"},
		{"deadline", context.DeadlineExceeded, ErrTimeout, "Connection timeout"},
		{"net timeout", &net.DNSError{Err: "timeout", IsTimeout: true}, ErrTimeout, "Connection timeout"},
		{"canceled", context.Canceled, ErrUnavailable, "Request canceled"},
		// One wording for every DNS failure, the URL check's (ReasonUnresolvable).
		{"dns not found", &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, ErrUnavailable, "Host cannot be resolved or invalid"},
		{"dns failure", &net.DNSError{Err: "server misbehaving", Name: "x"}, ErrUnavailable, "Host cannot be resolved or invalid"},
		{"dns not found, wrapped", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, ErrUnavailable, HostUnresolvable},
		{"refused", opErr(syscall.ECONNREFUSED), ErrUnavailable, "Connection refused"},
		{"reset", opErr(syscall.ECONNRESET), ErrUnavailable, "Connection reset by peer"},
		{"net unreachable", opErr(syscall.ENETUNREACH), ErrUnavailable, "Network is unreachable"},
		{"host unreachable", opErr(syscall.EHOSTUNREACH), ErrUnavailable, "No route to host"},
		{"unknown authority", x509.UnknownAuthorityError{}, ErrUnavailable, "TLS certificate verification failed"},
		{"hostname mismatch", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "x"}, ErrUnavailable, "TLS certificate verification failed"},
		{"not tls", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, ErrUnavailable, "TLS handshake failed"},
		{"eof", io.EOF, ErrUnavailable, "Connection closed by upstream"},
		{"unexpected eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ErrUnavailable, "Connection closed by upstream"},
		{"other", errors.New("something odd at 10.0.0.1"), ErrUnavailable, "Connection failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, reason := classify(tt.err)
			if kind != tt.kind || reason != tt.reason {
				t.Fatalf("classify(%v) = %v, %q; want %v, %q", tt.err, kind, reason, tt.kind, tt.reason)
			}
			ne := newNetError("GET", "https://r.example/a", tt.err)
			if !errors.Is(ne, ErrUnavailable) || !errors.Is(ne, tt.err) || ne.Timeout() != (tt.kind == ErrTimeout) {
				t.Fatalf("NetError %v does not match its class and cause", ne)
			}
		})
	}
}

func TestSentinels(t *testing.T) {
	for _, err := range []error{ErrTimeout, ErrTooManyRedirects} {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%v is not ErrUnavailable", err)
		}
		if errors.Is(err, ErrNotFound) {
			t.Errorf("%v is ErrNotFound", err)
		}
	}
	if errors.Is(ErrUnavailable, ErrTimeout) {
		t.Error("ErrUnavailable is ErrTimeout")
	}
}

func TestTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // failed handshakes are the point here
	srv.StartTLS()
	t.Cleanup(srv.Close)
	trusted := srv.Client().Transport.(*http.Transport).TLSClientConfig
	tests := []struct {
		name string
		url  string
		tls  *tls.Config
		want TestResult
	}{
		{"trusted", srv.URL, trusted, TestResult{Success: true}},
		{"unknown authority", srv.URL, nil, TestResult{Result: "Error: TLS certificate verification failed"}},
		{"plain http to tls port", "http://" + srv.Listener.Addr().String(), trusted, TestResult{Result: "Error: 400 - Bad Request"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := local(Options{TLSConfig: tt.tls})
			if got := c.Test(context.Background(), Endpoint{URL: tt.url}, ""); got != tt.want {
				t.Fatalf("Test = %+v; want %+v", got, tt.want)
			}
		})
	}
}
