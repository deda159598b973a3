package upstream

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// MaxURLLength is the longest upstream URL accepted, in characters, after
// normalisation (GitLab's limit).
const MaxURLLength = 255

// HostUnresolvable is the one wording for an upstream host name that does
// not resolve (no DNS record, no DNS server reachable, a name that is not a
// host name): GitLab's, after "is blocked: " when the URL is checked before
// it is saved or tested (ReasonUnresolvable), alone when a fetch or a
// connection test finds it out (classify). Operators search for one phrase.
const HostUnresolvable = "Host cannot be resolved or invalid"

// Reasons carried by *URLError. They are GitLab's validation messages, so the
// admin API can put them under the "url" field as they are.
const (
	ReasonInvalid      = "must be a valid URL"
	ReasonTooLong      = "is too long (maximum is 255 characters)"
	ReasonLocalhost    = "is blocked: Requests to localhost are not allowed"
	ReasonLocalNetwork = "is blocked: Requests to the local network are not allowed"
	ReasonLinkLocal    = "is blocked: Requests to the link local network are not allowed"
	ReasonUnresolvable = "is blocked: " + HostUnresolvable
)

// URLError is an upstream URL that is malformed or points somewhere registryd
// must not connect to. Reason is one of the Reason* constants.
type URLError struct {
	Reason string
	// Host is the host name or the IP address that was refused; empty for
	// malformed URLs. It never carries credentials.
	Host string
}

// Error reads like a Rails full message ("url must be a valid URL"); show
// Reason alone under a field name.
func (e *URLError) Error() string { return "url " + e.Reason }

// Blocked reports whether the URL was refused for where it points, rather
// than for its syntax.
func (e *URLError) Blocked() bool { return strings.HasPrefix(e.Reason, "is blocked") }

// NormalizeURL canonicalises an upstream base URL the way GitLab does before
// validating it: trim whitespace, lower-case the host, drop trailing slashes
// and a trailing ".git", drop the default port, keep userinfo. It returns
// *URLError{Reason: ReasonInvalid} for anything that is not an absolute
// http(s) URL with a sane host, and ReasonTooLong past MaxURLLength.
//
// Beyond GitLab it also refuses a query or fragment (an artifact path cannot
// be appended to them), IPv6 zones, non-ASCII hosts (use punycode), and
// numeric hosts that are not dotted-quad IPv4 ("127.1", "2130706433"), whose
// meaning differs between resolvers. IPv6 literals and ports are written in
// canonical form.
func NormalizeURL(raw string) (string, error) {
	invalid := &URLError{Reason: ReasonInvalid}
	raw = strings.TrimSpace(raw)
	if raw == "" || !utf8.ValidString(raw) {
		return "", invalid
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", invalid
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", invalid
	}
	host, ok := normalizeHost(u.Hostname())
	if !ok {
		return "", invalid
	}
	port, ok := normalizePort(u.Scheme, u.Port())
	if !ok {
		return "", invalid
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}

	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	if u.User != nil {
		b.WriteString(u.User.String())
		b.WriteByte('@')
	}
	b.WriteString(host)
	b.WriteString(trimBasePath(u.EscapedPath()))
	out := b.String()

	// Re-parse: the string we built must mean what we think it means, or the
	// result would not be stable under a second normalisation.
	if v, err := url.Parse(out); err != nil || v.Host != host || v.RawQuery != "" || v.Fragment != "" {
		return "", invalid
	}
	if utf8.RuneCountInString(out) > MaxURLLength {
		return "", &URLError{Reason: ReasonTooLong}
	}
	return out, nil
}

// trimBasePath drops trailing slashes and ".git" suffixes until neither is
// left, so that normalising twice changes nothing ("a.git/" -> "a").
func trimBasePath(p string) string {
	for {
		q := strings.TrimSuffix(strings.TrimRight(p, "/"), ".git")
		if q == p {
			return p
		}
		p = q
	}
}

// normalizeHost lower-cases and checks a host name or IP literal.
func normalizeHost(h string) (string, bool) {
	if h == "" || len(h) > 253 {
		return "", false
	}
	if strings.Contains(h, ":") || strings.Contains(h, "%") {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", false
		}
		return a.String(), true
	}
	h = strings.ToLower(h)
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String(), a.Is4()
	}
	// A last label that looks numeric is not a DNS name (TLDs are letters):
	// it is one of inet_aton's shorthands, which some resolvers turn into
	// loopback. Refuse rather than guess.
	last := labels[len(labels)-1]
	if strings.HasPrefix(last, "0x") || strings.Trim(last, "0123456789") == "" {
		return "", false
	}
	return h, true
}

// normalizePort returns the port in canonical form, or "" for the scheme's
// default port or no port.
func normalizePort(scheme, p string) (string, bool) {
	if p == "" {
		return "", true
	}
	if len(p) > 5 {
		return "", false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", false
	}
	if scheme == "http" && n == 80 || scheme == "https" && n == 443 {
		return "", true
	}
	return strconv.Itoa(n), true
}

// Resolver looks host names up for CheckURL. *net.Resolver implements it;
// tests inject a fake so they need no DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL validates an upstream URL for saving or testing: NormalizeURL's
// checks, then, unless Options.AllowLocalNetwork, refuses hosts that are or
// resolve to loopback, unspecified, private (RFC 1918, fc00::/7), CGNAT
// (100.64/10), link-local or multicast addresses, and hosts that do not
// resolve. Every address a name resolves to must be allowed. The error is a
// *URLError. With AllowLocalNetwork it does no DNS lookup at all.
//
// CheckURL is advice at save time; the dialer repeats the address check at
// connect time, so a name that later resolves somewhere else (DNS rebinding)
// is still refused.
func (c *Client) CheckURL(ctx context.Context, raw string) error {
	norm, err := NormalizeURL(raw)
	if err != nil {
		return err
	}
	if c.allowLocal {
		return nil
	}
	u, err := url.Parse(norm)
	if err != nil {
		return &URLError{Reason: ReasonInvalid}
	}
	host := u.Hostname()
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		// RFC 6761: always loopback, whatever a resolver says.
		return &URLError{Reason: ReasonLocalhost, Host: host}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if r := blockedReason(a); r != "" {
			return &URLError{Reason: r, Host: host}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.checkTimeout)
	defer cancel()
	addrs, err := c.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return &URLError{Reason: ReasonUnresolvable, Host: host}
	}
	for _, a := range addrs {
		if r := blockedReason(a); r != "" {
			return &URLError{Reason: r, Host: host}
		}
	}
	return nil
}

var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	broadcast   = netip.MustParseAddr("255.255.255.255")
	siteLocal   = netip.MustParsePrefix("fec0::/10")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// blockedReason says why an address may not be connected to, or "" if it may.
func blockedReason(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	// Addresses that carry an IPv4 address inside are judged by it: NAT64 and
	// 6to4 gateways would otherwise be a way to reach a private IPv4 host.
	if a.Is6() && (nat64.Contains(a) || sixToFour.Contains(a)) {
		b := a.As16()
		var v4 [4]byte
		if nat64.Contains(a) {
			copy(v4[:], b[12:16])
		} else {
			copy(v4[:], b[2:6])
		}
		return blockedReason(netip.AddrFrom4(v4))
	}
	switch {
	case a.IsLoopback(), a.IsUnspecified(), thisNetwork.Contains(a):
		return ReasonLocalhost
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return ReasonLinkLocal
	case a.IsPrivate(), cgnat.Contains(a), siteLocal.Contains(a),
		a.IsMulticast(), a.IsInterfaceLocalMulticast(), a == broadcast:
		return ReasonLocalNetwork
	}
	return ""
}

// dialControl runs after the resolver and before connect(2), on the address
// actually dialled, so DNS answers that changed since CheckURL (rebinding) or
// redirects to another host cannot reach a blocked address.
func dialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &URLError{Reason: ReasonUnresolvable}
	}
	if r := blockedReason(ap.Addr()); r != "" {
		return &URLError{Reason: r, Host: ap.Addr().String()}
	}
	return nil
}

var _ Resolver = (*net.Resolver)(nil)
