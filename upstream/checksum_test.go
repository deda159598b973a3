package upstream

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	sha1A   = "da39a3ee5e6b4b0d3255bfef95601890afd80709"
	sha1B   = "a9993e364706816aba3e25717850c26c9cd0d89d"
	md5A    = "d41d8cd98f00b204e9800998ecf8427e"
	sha256A = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func TestParseHexDigest(t *testing.T) {
	tests := []struct {
		name, v string
		n       int
		want    string
	}{
		{"sha1", sha1A, 40, sha1A},
		{"upper case", strings.ToUpper(sha1A), 40, sha1A},
		{"spaces trimmed", "  " + sha1A + " \t", 40, sha1A},
		{"one short", sha1A[:39], 40, ""},
		{"one long", sha1A + "0", 40, ""},
		{"not hex", "g" + sha1A[1:], 40, ""},
		{"control byte", "\x10" + sha1A[1:], 40, ""},
		{"inner space", sha1A[:20] + " " + sha1A[21:], 40, ""},
		{"md5", md5A, 32, md5A},
		{"empty", "", 40, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseHexDigest(tt.v, tt.n); got != tt.want {
				t.Fatalf("ParseHexDigest(%q, %d) = %q; want %q", tt.v, tt.n, got, tt.want)
			}
		})
	}
}

// TestOfferedChecksums: checksum headers (and Nexus ETags) reach the
// Response; malformed ones count as not offered; two different SHA-1s make
// the answer unusable.
func TestOfferedChecksums(t *testing.T) {
	type want struct{ sha1, md5, sha256 string }
	tests := []struct {
		name     string
		headers  map[string]string
		want     want
		conflict bool
	}{
		{"none", nil, want{}, false},
		{"maven central", map[string]string{"X-Checksum-Sha1": sha1A, "X-Checksum-Md5": md5A}, want{sha1A, md5A, ""}, false},
		{"artifactory", map[string]string{"X-Checksum-Sha1": strings.ToUpper(sha1A), "X-Checksum-Md5": md5A, "X-Checksum-Sha256": sha256A}, want{sha1A, md5A, sha256A}, false},
		{"malformed headers", map[string]string{"X-Checksum-Sha1": sha1A[:39], "X-Checksum-Md5": "zz" + md5A[2:], "X-Checksum-Sha256": sha1A}, want{}, false},
		{"nexus etag", map[string]string{"ETag": `"{SHA1{` + sha1A + `}}"`}, want{sha1: sha1A}, false},
		{"nexus weak etag", map[string]string{"ETag": `W/"{SHA1{` + sha1B + `}}"`}, want{sha1: sha1B}, false},
		{"ordinary etag", map[string]string{"ETag": `"` + sha1A + `"`}, want{}, false},
		{"malformed nexus etag", map[string]string{"ETag": `"{SHA1{` + sha1A[:30] + `}}"`}, want{}, false},
		{"etag and header agree", map[string]string{"ETag": `"{SHA1{` + strings.ToUpper(sha1A) + `}}"`, "X-Checksum-Sha1": sha1A}, want{sha1: sha1A}, false},
		{"malformed header, etag used", map[string]string{"ETag": `"{SHA1{` + sha1A + `}}"`, "X-Checksum-Sha1": "nope"}, want{sha1: sha1A}, false},
		{"etag and header disagree", map[string]string{"ETag": `"{SHA1{` + sha1B + `}}"`, "X-Checksum-Sha1": sha1A}, want{}, true},
	}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(strings.Trim(r.URL.Path, "/"))
		for k, v := range tests[i].headers {
			w.Header().Set(k, v)
		}
		w.Write([]byte("file"))
	}))
	c := local(Options{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, strconv.Itoa(i), "")
			if tt.conflict {
				var ae *AnswerError
				if !errors.As(err, &ae) || ae.Reason != "X-Checksum-Sha1 and ETag name different SHA-1s" {
					t.Fatalf("err = %v; want the SHA-1 conflict", err)
				}
				// Head is not refused; the SHA-1 is just not trusted.
				resp, err = c.Head(context.Background(), Endpoint{URL: srv.URL}, strconv.Itoa(i))
				if err != nil || resp.SHA1 != "" {
					t.Fatalf("Head: %v, SHA1 %q", err, resp.SHA1)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := (want{resp.SHA1, resp.MD5, resp.SHA256}); got != tt.want {
				t.Fatalf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestParseChecksumFile(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"bare", sha1A, sha1A},
		{"newline", sha1A + "\n", sha1A},
		{"crlf", sha1A + "\r\n", sha1A},
		{"upper case", strings.ToUpper(sha1A) + "\n", sha1A},
		{"sha1sum text", sha1A + "  a-1.jar\n", sha1A},
		{"sha1sum binary", sha1A + " *a-1.jar\n", sha1A},
		{"tab", sha1A + "\ta-1.jar", sha1A},
		{"leading blank lines", "\n  \n" + sha1A + "\n", sha1A},
		{"bom", "\xef\xbb\xbf" + sha1A, sha1A},
		{"openssl", "SHA1(a-1.jar)= " + sha1A + "\n", sha1A},
		{"bsd", "SHA1 (a-1.jar) = " + sha1A + "\n", sha1A},
		{"filename with equals then digest first", sha1A + " a= b\n", sha1A},
		{"empty", "", ""},
		{"blank", "\n\n", ""},
		{"short", sha1A[:39], ""},
		{"md5 length", md5A, ""},
		{"html", "<html><body>Not here</body></html>", ""},
		{"sha256", sha256A, ""},
		{"digest not on first line", "checksum:\n" + sha1A, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseChecksumFile([]byte(tt.in)); got != tt.want {
				t.Fatalf("parseChecksumFile(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestGetChecksum(t *testing.T) {
	seen := make(chan string, 16)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
		switch r.URL.Path {
		case "/org/a/1/a-1.jar.sha1":
			w.Write([]byte(sha1A + "  a-1.jar\n"))
		case "/org/a/1/a-1.pom.sha1":
			w.Write([]byte("SHA1(a-1.pom)= " + strings.ToUpper(sha1B) + "\n"))
		case "/gone.jar.sha1":
			w.WriteHeader(http.StatusGone)
		case "/big.jar.sha1":
			w.Write([]byte(sha1A + strings.Repeat(" ", MaxChecksumFileSize)))
		case "/limit.jar.sha1":
			w.Write([]byte(sha1A + strings.Repeat(" ", MaxChecksumFileSize-40)))
		case "/html.jar.sha1":
			w.Write([]byte("<html>login</html>"))
		case "/down.jar.sha1":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	tests := []struct {
		name, path string
		want       string
		notFound   bool
		reason     string
		unavail    bool
	}{
		{name: "sha1sum format", path: "org/a/1/a-1.jar", want: sha1A},
		{name: "openssl format", path: "org/a/1/a-1.pom", want: sha1B},
		{name: "exactly 1 KiB", path: "limit.jar", want: sha1A},
		{name: "404", path: "missing.jar", notFound: true},
		{name: "410", path: "gone.jar", notFound: true},
		{name: "over 1 KiB", path: "big.jar", reason: "checksum file is longer than 1 KiB"},
		{name: "malformed", path: "html.jar", reason: "checksum file is malformed"},
		{name: "503", path: "down.jar", unavail: true},
	}
	c := local(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.GetChecksum(context.Background(), Endpoint{URL: srv.URL}, tt.path)
			if p := <-seen; p != "/"+tt.path+".sha1" {
				t.Fatalf("server saw %s", p)
			}
			switch {
			case tt.notFound:
				var se *StatusError
				if !errors.As(err, &se) || !errors.Is(err, ErrNotFound) {
					t.Fatalf("err = %v; want a *StatusError matching ErrNotFound", err)
				}
			case tt.unavail:
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err = %v; want ErrUnavailable", err)
				}
			case tt.reason != "":
				var ae *AnswerError
				if !errors.As(err, &ae) || ae.Reason != tt.reason {
					t.Fatalf("err = %v; want *AnswerError %q", err, tt.reason)
				}
				if !strings.Contains(err.Error(), tt.path+".sha1") {
					t.Fatalf("error %q does not name the file", err)
				}
			default:
				if err != nil || got != tt.want {
					t.Fatalf("got %q, %v; want %q", got, err, tt.want)
				}
			}
		})
	}
}

// TestGetChecksumTimeout: the whole fetch is bounded by CheckTimeout.
func TestGetChecksumTimeout(t *testing.T) {
	srv := blockingServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", "41")
		w.Write([]byte(sha1A[:10]))
		w.(http.Flusher).Flush()
	})
	c := local(Options{CheckTimeout: 100 * time.Millisecond})
	_, err := c.GetChecksum(context.Background(), Endpoint{URL: srv.URL}, "a.jar")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v; want ErrTimeout", err)
	}
}
