package clientkey

import (
	"net/netip"
	"testing"
)

// One client per IPv4 address and per IPv6 /64, whichever spelling the
// address comes in: the key of the connection limits and of the audit
// budgets of anonymous callers.
func TestClientOfForConnAndAuditLimits(t *testing.T) {
	for _, tc := range []struct {
		addr string // "" for the zero Addr
		want string // "" for no client
	}{
		{"192.0.2.1", "192.0.2.1/32"},
		{"::ffff:192.0.2.1", "192.0.2.1/32"}, // a dual-stack listener's IPv4 peer
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{"", ""},
	} {
		var a netip.Addr
		if tc.addr != "" {
			a = netip.MustParseAddr(tc.addr)
		}
		got := Of(a)
		if tc.want == "" {
			if got.IsValid() {
				t.Errorf("Of(%v) = %v, want none", a, got)
			}
			continue
		}
		if want := netip.MustParsePrefix(tc.want); got != want {
			t.Errorf("Of(%v) = %v, want %v", a, got, want)
		}
	}
	// Two IPv4-mapped addresses are two clients, not one IPv6 /64.
	if Of(netip.MustParseAddr("::ffff:192.0.2.1")) == Of(netip.MustParseAddr("::ffff:198.51.100.1")) {
		t.Error("two IPv4-mapped addresses are one client")
	}
}
