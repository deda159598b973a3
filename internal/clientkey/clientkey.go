// Package clientkey says which client a peer address counts as, for the
// proxy listener's connection limits and for the engine's audit budgets of
// anonymous callers: one rule in one place, so a client is the same client
// to both.
package clientkey

import (
	"net"
	"net/netip"
)

// ipv6ClientBits is the prefix of an IPv6 client: a host is given a whole
// /64 and picks any address in it.
const ipv6ClientBits = 64

// Addr is the client of a connection: the peer's IP without port and
// zone, an IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack
// listener sees IPv4 clients that way). Invalid when the peer is no IP.
func Addr(a net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if a == nil {
			return netip.Addr{}
		}
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		ip = ap.Addr()
	}
	return ip.Unmap().WithZone("")
}

// Of is the client an address belongs to: the IPv4 address (/32),
// or the /64 of an IPv6 one. An IPv4-mapped IPv6 address is its IPv4
// client and a zone is dropped, as Addr does (taken as IPv6, every
// mapped address would fall in ::ffff:0:0/96's one /64: all IPv4 clients
// as one). Invalid for an invalid address.
func Of(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(ipv6ClientBits)
	return p
}
