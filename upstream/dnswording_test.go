package upstream

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// TestDNSFailureWording: a host that does not resolve reads the same
// wherever it shows (docs/api.md, "Upstreams"; README, "Troubleshooting"):
// GitLab's "Host cannot be resolved or invalid", after "is blocked: " when the
// URL check finds it before a save or a connection test, alone when a fetch
// does.
func TestDNSFailureWording(t *testing.T) {
	const gitlab = "is blocked: Host cannot be resolved or invalid"
	if ReasonUnresolvable != gitlab {
		t.Fatalf("ReasonUnresolvable = %q, want GitLab's %q", ReasonUnresolvable, gitlab)
	}
	c := New(Options{Resolver: fakeResolver{}})
	var ue *URLError
	if err := c.CheckURL(context.Background(), "https://maven.example.com/releases"); !errors.As(err, &ue) ||
		ue.Reason != gitlab {
		t.Fatalf("CheckURL of a name that does not resolve: %v", err)
	}
	if got := c.Test(context.Background(), Endpoint{URL: "https://maven.example.com/releases"}, ""); got.Success ||
		got.Result != "Error: "+gitlab {
		t.Fatalf("connection test: %+v", got)
	}
	for _, dnsErr := range []*net.DNSError{{Err: "no such host", IsNotFound: true}, {Err: "server misbehaving"}} {
		_, reason := classify(&net.OpError{Op: "dial", Err: dnsErr})
		if reason != HostUnresolvable || !strings.HasSuffix(gitlab, reason) {
			t.Errorf("a fetch's DNS failure (%v) reads %q", dnsErr, reason)
		}
	}
}
