package connlimit

import (
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"registryd/internal/testlog"
)

// A client is an IPv6 /64 (a host picks any address of its /64), an IPv4
// address, and an IPv4-mapped IPv6 peer the IPv4 client it is; the warn
// line names the /64.
func TestConnLimitIPv6Per64(t *testing.T) {
	h := &testlog.Recorder{}
	l := New(2, 0, slog.New(h))
	from := func(ip string) net.Conn {
		return l.admit(pipeFrom(t, &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}))
	}
	if from("2001:db8:1:2::1") == nil || from("2001:db8:1:2:ffff:ffff:ffff:fffe") == nil {
		t.Fatal("the first two of a /64 were refused")
	}
	if from("2001:db8:1:2:abcd::1") != nil {
		t.Fatal("a third address of the same /64 was admitted over the limit")
	}
	if n := l.conns(netip.MustParseAddr("2001:db8:1:2::77")); n != 2 {
		t.Fatalf("the /64 holds %d connections, want 2", n)
	}
	if from("2001:db8:1:3::1") == nil {
		t.Fatal("the next /64 was refused: it is another client")
	}
	if len(h.Lines()) != 1 || !strings.Contains(h.Lines()[0], "client=2001:db8:1:2::/64 ") {
		t.Fatalf("log lines %q: want one naming the /64", h.Lines())
	}
	if from("192.0.2.1") == nil || l.admit(pipeFrom(t, &net.TCPAddr{IP: netip.MustParseAddr("::ffff:192.0.2.1").AsSlice()})) == nil {
		t.Fatal("an IPv4 client was refused under its limit")
	}
	if from("192.0.2.1") != nil {
		t.Fatal("the IPv4 client, once mapped, was counted apart")
	}
	if from("192.0.2.2") == nil {
		t.Fatal("the next IPv4 address was refused: it is another client")
	}
}

// Slowloris from 40 addresses: each opens connections as fast as it can,
// up to its limit, and keeps them. fasthttp serves proxy.concurrency at
// once (a connection past it is answered 503 and closed: modelled here).
// Past half of proxy.concurrency each client's share shrinks with what is
// left, so the 40 stop with room to spare, and a newcomer is served, up to
// a fair share of its own; in IPv6, an attacker's whole /64 is one client
// however many of its addresses it uses. The limits keep the defaults'
// ratio (256 of 8,192); without the fair share, 40 × 64 connections take
// all 2,048 and the newcomer gets 503.
func TestConnLimitFairShareAgainstManyAddresses(t *testing.T) {
	const perClient, global, attackers = 64, 2048, 40
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			// addr is attacker i's address for its n-th connection.
			addr := func(i, n int) net.Addr {
				if family == "ipv4" {
					return &net.TCPAddr{IP: net.IPv4(198, 51, 100, byte(i))}
				}
				var a [16]byte
				copy(a[:], net.ParseIP("2001:db8::"))
				a[7], a[14], a[15] = byte(i), byte(n>>8), byte(n) // the /64 of i, a new address each time
				return &net.TCPAddr{IP: a[:]}
			}
			l := New(perClient, global, slog.New(slog.DiscardHandler))
			// open is one attempt: admitted by the limiter, then by
			// fasthttp while it serves fewer than global.
			open := func(a net.Addr) bool {
				c := l.admit(pipeFrom(t, a))
				if c == nil {
					return false
				}
				if l.open.Load() > global {
					c.Close() // fasthttp's 503
					return false
				}
				return true
			}
			held := 0
			for n := range 2 * perClient {
				for i := range attackers {
					if open(addr(i, n)) {
						held++
					}
				}
			}
			if left := global - held; left < global/8 {
				t.Fatalf("%d addresses hold %d of %d connections", attackers, held, global)
			}
			if l.refusedFair.Load() == 0 {
				t.Fatal("no refusal counted as fair_share")
			}
			got := 0
			for range perClient {
				if open(&net.TCPAddr{IP: net.ParseIP("203.0.113.9")}) {
					got++
				}
			}
			if got < fairFloor {
				t.Fatalf("a newcomer was served %d connections, want at least %d (the attackers hold %d)", got, fairFloor, held)
			}
			t.Logf("%d attackers hold %d of %d; a newcomer got %d", attackers, held, global, got)
		})
	}
}

// The share: max_conns_per_client up to half of proxy.concurrency, then
// falling with what is left, never below the floor (nor above the limit).
func TestConnLimitShare(t *testing.T) {
	l := New(256, 8192, slog.New(slog.DiscardHandler))
	for _, tt := range []struct {
		open  int64
		share int
		why   string
	}{
		{0, 256, refusedPerClient},
		{4096, 256, refusedPerClient},
		{4097, 255, refusedFairShare},
		{6144, 128, refusedFairShare},
		{8000, 12, refusedFairShare},
		{8192, fairFloor, refusedFairShare},
		{9000, fairFloor, refusedFairShare},
	} {
		l.open.Store(tt.open)
		if n, why := l.share(); n != tt.share || why != tt.why {
			t.Errorf("open %d: share %d (%s), want %d (%s)", tt.open, n, why, tt.share, tt.why)
		}
	}
	small := New(4, 100, slog.New(slog.DiscardHandler))
	small.open.Store(100)
	if n, _ := small.share(); n != 4 {
		t.Errorf("a limit under the floor: share %d, want the limit 4", n)
	}
	off := New(16, 0, slog.New(slog.DiscardHandler))
	off.open.Store(1 << 20)
	if n, why := off.share(); n != 16 || why != refusedPerClient {
		t.Errorf("no global: share %d (%s)", n, why)
	}
}
