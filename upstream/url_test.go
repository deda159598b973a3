package upstream

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizeURL(t *testing.T) {
	long := "https://repo.example.com/" + strings.Repeat("a", MaxURLLength-len("https://repo.example.com/"))
	tests := []struct {
		name, in, want, reason string
	}{
		{name: "plain", in: "https://repo.example.com/maven2", want: "https://repo.example.com/maven2"},
		{name: "trim whitespace", in: " \t https://repo.example.com/maven2 \n", want: "https://repo.example.com/maven2"},
		{name: "lower-case host", in: "https://Repo.EXAMPLE.com/Maven2", want: "https://repo.example.com/Maven2"},
		{name: "upper-case scheme", in: "HTTPS://repo.example.com", want: "https://repo.example.com"},
		{name: "trailing slashes", in: "https://repo.example.com/maven2///", want: "https://repo.example.com/maven2"},
		{name: "root slash", in: "https://repo.example.com/", want: "https://repo.example.com"},
		{name: "trailing .git", in: "https://git.example.com/group/repo.git", want: "https://git.example.com/group/repo"},
		{name: ".git then slash", in: "https://git.example.com/repo.git/", want: "https://git.example.com/repo"},
		{name: "repeated suffixes", in: "https://git.example.com/repo/.git.git/", want: "https://git.example.com/repo"},
		{name: "default https port", in: "https://repo.example.com:443/m2", want: "https://repo.example.com/m2"},
		{name: "default http port", in: "http://repo.example.com:80/m2", want: "http://repo.example.com/m2"},
		{name: "non-default port kept", in: "https://repo.example.com:8443/m2", want: "https://repo.example.com:8443/m2"},
		{name: "443 on http kept", in: "http://repo.example.com:443", want: "http://repo.example.com:443"},
		{name: "port leading zeros", in: "http://repo.example.com:0080", want: "http://repo.example.com"},
		{name: "empty port", in: "http://repo.example.com:/x", want: "http://repo.example.com/x"},
		{name: "userinfo kept", in: "https://user:p%40ss@Repo.example.com/m2/", want: "https://user:p%40ss@repo.example.com/m2"},
		{name: "ipv4", in: "http://192.0.2.10:8081/repo", want: "http://192.0.2.10:8081/repo"},
		{name: "ipv6 canonical", in: "http://[2001:DB8:0::1]:80/repo", want: "http://[2001:db8::1]/repo"},
		{name: "escaped path kept", in: "https://repo.example.com/a%20b/", want: "https://repo.example.com/a%20b"},
		{name: "space in path escaped", in: "https://repo.example.com/a b", want: "https://repo.example.com/a%20b"},
		{name: "empty query mark", in: "https://repo.example.com/m2?", want: "https://repo.example.com/m2"},
		{name: "underscore host", in: "https://my_repo.example.com", want: "https://my_repo.example.com"},
		{name: "max length", in: long, want: long},

		{name: "empty", in: "", reason: ReasonInvalid},
		{name: "blank", in: "   ", reason: ReasonInvalid},
		{name: "not a url", in: "invalid-url", reason: ReasonInvalid},
		{name: "relative", in: "/maven2", reason: ReasonInvalid},
		{name: "ftp scheme", in: "ftp://repo.example.com", reason: ReasonInvalid},
		{name: "file scheme", in: "file:///etc/passwd", reason: ReasonInvalid},
		{name: "no host", in: "https:///maven2", reason: ReasonInvalid},
		{name: "opaque", in: "https:repo.example.com", reason: ReasonInvalid},
		{name: "port only", in: "http://:8080/x", reason: ReasonInvalid},
		{name: "port zero", in: "http://repo.example.com:0", reason: ReasonInvalid},
		{name: "port too big", in: "http://repo.example.com:65536", reason: ReasonInvalid},
		{name: "query", in: "https://repo.example.com/m2?token=x", reason: ReasonInvalid},
		{name: "fragment", in: "https://repo.example.com/m2#top", reason: ReasonInvalid},
		{name: "empty label", in: "https://repo..example.com", reason: ReasonInvalid},
		{name: "bad host char", in: "https://repo!.example.com", reason: ReasonInvalid},
		{name: "non-ascii host", in: "https://bücher.example", reason: ReasonInvalid},
		{name: "ipv6 zone", in: "http://[fe80::1%25eth0]/", reason: ReasonInvalid},
		{name: "short ipv4", in: "http://127.1/", reason: ReasonInvalid},
		{name: "decimal ipv4", in: "http://2130706433/", reason: ReasonInvalid},
		{name: "hex ipv4", in: "http://0x7f.0.0.1/", reason: ReasonInvalid},
		{name: "octal-ish ipv4", in: "http://0177.0.0.1/", reason: ReasonInvalid},
		{name: "control char", in: "https://repo.example.com/a\x00b", reason: ReasonInvalid},
		{name: "too long", in: long + "b", reason: ReasonTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeURL(tt.in)
			if tt.reason != "" {
				var ue *URLError
				if !errors.As(err, &ue) || ue.Reason != tt.reason {
					t.Fatalf("NormalizeURL(%q) = %q, %v; want *URLError %q", tt.in, got, err, tt.reason)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"https://repo.example.com/maven2/", "HTTP://U:P@Repo.Example.COM:80/a.git/", "http://[::1]:443/",
		"https://repo.example.com/a%2Fb/.git", "http://a_b.c/%zz", "https://x.y/a b/", " http://h/?#",
		"http://user@h", "http://h:0080", "https://h/.git/.git//",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := NormalizeURL(in)
		if err != nil {
			var ue *URLError
			if !errors.As(err, &ue) {
				t.Fatalf("NormalizeURL(%q): error %T is not *URLError", in, err)
			}
			return
		}
		if n := utf8.RuneCountInString(out); n > MaxURLLength {
			t.Fatalf("NormalizeURL(%q) = %q: %d characters", in, out, n)
		}
		again, err := NormalizeURL(out)
		if err != nil || again != out {
			t.Fatalf("not idempotent: NormalizeURL(%q) = %q, then %q, %v", in, out, again, err)
		}
	})
}

// fakeResolver answers from a map; names not in it do not exist.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ips, ok := f[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(ips))
	for i, s := range ips {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

func TestCheckURL(t *testing.T) {
	res := fakeResolver{
		"repo.example.com":     {"93.184.215.14"},
		"v6.example.com":       {"2606:4700::1111"},
		"internal.example.com": {"10.1.2.3"},
		"mixed.example.com":    {"93.184.215.14", "192.168.1.5"},
		"loop.example.com":     {"127.0.0.1"},
		"empty.example.com":    {},
		"meta.example.com":     {"169.254.169.254"},
	}
	tests := []struct {
		name       string
		url        string
		allowLocal bool
		reason     string // "" means allowed
	}{
		{name: "public name", url: "https://repo.example.com/maven2"},
		{name: "public ipv6 name", url: "https://v6.example.com/maven2"},
		{name: "public ip literal", url: "http://93.184.215.14/"},
		{name: "localhost name", url: "http://localhost:8080/", reason: ReasonLocalhost},
		{name: "localhost subdomain", url: "http://repo.localhost/", reason: ReasonLocalhost},
		{name: "loopback literal", url: "http://127.0.0.1/", reason: ReasonLocalhost},
		{name: "loopback range", url: "http://127.8.9.10/", reason: ReasonLocalhost},
		{name: "ipv6 loopback", url: "http://[::1]/", reason: ReasonLocalhost},
		{name: "unspecified", url: "http://0.0.0.0/", reason: ReasonLocalhost},
		{name: "ipv6 unspecified", url: "http://[::]/", reason: ReasonLocalhost},
		{name: "mapped loopback", url: "http://[::ffff:127.0.0.1]/", reason: ReasonLocalhost},
		{name: "name resolving to loopback", url: "http://loop.example.com/", reason: ReasonLocalhost},
		{name: "rfc1918 10/8", url: "http://10.0.0.1/", reason: ReasonLocalNetwork},
		{name: "rfc1918 172.16/12", url: "http://172.16.5.4/", reason: ReasonLocalNetwork},
		{name: "rfc1918 192.168/16", url: "http://192.168.0.1/", reason: ReasonLocalNetwork},
		{name: "ula fc00::/7", url: "http://[fd00::1]/", reason: ReasonLocalNetwork},
		{name: "cgnat", url: "http://100.64.0.1/", reason: ReasonLocalNetwork},
		{name: "multicast", url: "http://239.1.2.3/", reason: ReasonLocalNetwork},
		{name: "link-local multicast", url: "http://224.0.0.251/", reason: ReasonLinkLocal},
		{name: "broadcast", url: "http://255.255.255.255/", reason: ReasonLocalNetwork},
		{name: "nat64 private", url: "http://[64:ff9b::a00:1]/", reason: ReasonLocalNetwork},
		{name: "6to4 loopback", url: "http://[2002:7f00:1::]/", reason: ReasonLocalhost},
		{name: "link-local", url: "http://169.254.169.254/", reason: ReasonLinkLocal},
		{name: "ipv6 link-local", url: "http://[fe80::1]/", reason: ReasonLinkLocal},
		{name: "name resolving to metadata", url: "http://meta.example.com/", reason: ReasonLinkLocal},
		{name: "name resolving to private", url: "https://internal.example.com/", reason: ReasonLocalNetwork},
		{name: "any private answer blocks", url: "https://mixed.example.com/", reason: ReasonLocalNetwork},
		{name: "unresolvable", url: "https://nope.example.com/", reason: ReasonUnresolvable},
		{name: "no addresses", url: "https://empty.example.com/", reason: ReasonUnresolvable},
		{name: "invalid", url: "invalid-url", reason: ReasonInvalid},
		{name: "invalid even if local allowed", url: "ftp://localhost/", allowLocal: true, reason: ReasonInvalid},
		{name: "allow local: localhost", url: "http://localhost:8080/", allowLocal: true},
		{name: "allow local: private", url: "http://10.0.0.1/", allowLocal: true},
		{name: "allow local: link-local", url: "http://169.254.169.254/", allowLocal: true},
		{name: "allow local: no lookup", url: "https://nope.example.com/", allowLocal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{AllowLocalNetwork: tt.allowLocal, Resolver: res})
			err := c.CheckURL(context.Background(), tt.url)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CheckURL(%q) = %v; want nil", tt.url, err)
				}
				return
			}
			var ue *URLError
			if !errors.As(err, &ue) || ue.Reason != tt.reason {
				t.Fatalf("CheckURL(%q) = %v; want reason %q", tt.url, err, tt.reason)
			}
			if ue.Blocked() != strings.HasPrefix(tt.reason, "is blocked") {
				t.Errorf("Blocked() = %v for %q", ue.Blocked(), tt.reason)
			}
		})
	}
}

func TestDialControl(t *testing.T) {
	tests := []struct {
		name, addr, reason string
	}{
		{"public v4", "93.184.215.14:443", ""},
		{"public v6", "[2606:4700::1111]:443", ""},
		{"loopback", "127.0.0.1:8080", ReasonLocalhost},
		{"loopback v6", "[::1]:80", ReasonLocalhost},
		{"mapped private", "[::ffff:10.0.0.1]:80", ReasonLocalNetwork},
		{"link-local with zone", "[fe80::1%eth0]:80", ReasonLinkLocal},
		{"metadata", "169.254.169.254:80", ReasonLinkLocal},
		{"not an address", "example.com:80", ReasonUnresolvable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dialControl("tcp", tt.addr, nil)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("dialControl(%s) = %v; want nil", tt.addr, err)
				}
				return
			}
			var ue *URLError
			if !errors.As(err, &ue) || ue.Reason != tt.reason {
				t.Fatalf("dialControl(%s) = %v; want %q", tt.addr, err, tt.reason)
			}
		})
	}
}
