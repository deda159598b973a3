package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// payload is n bytes of compressible but not trivial data.
func payload(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = "abcdefgh<>/ \n"[r.IntN(13)]
	}
	return b
}

func compress(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "zlib":
		w = zlib.NewWriter(&buf)
	case "flate":
		w, err = flate.NewWriter(&buf, flate.DefaultCompression)
	case "zstd":
		w, err = zstd.NewWriter(&buf)
	default:
		t.Fatalf("unknown coding %s", coding)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// encodedServer answers every GET with the bytes and headers of the
// matching case, by path.
type encodedAnswer struct {
	encodings []string // Content-Encoding header lines
	body      []byte
	length    int // Content-Length to announce; 0 means len(body)
}

func encodedServer(t *testing.T, answers map[string]encodedAnswer) string {
	t.Helper()
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		for _, e := range a.encodings {
			w.Header().Add("Content-Encoding", e)
		}
		n := a.length
		if n == 0 {
			n = len(a.body)
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(a.body)
	}))
	return srv.URL
}

func TestGetDecodes(t *testing.T) {
	plain := payload(300 << 10)
	small := []byte("<project/>\n")
	gz := compress(t, "gzip", plain)
	zl := compress(t, "zlib", plain)
	fl := compress(t, "flate", plain)
	zs := compress(t, "zstd", plain)
	multi := append(compress(t, "gzip", small), compress(t, "gzip", small)...)

	tests := []struct {
		name     string
		path     string
		answer   encodedAnswer
		want     []byte
		encoding string
	}{
		{"identity", "/a.jar", encodedAnswer{encodings: []string{"identity"}, body: small}, small, ""},
		{"none", "/a.jar", encodedAnswer{body: small}, small, ""},
		{"gzip", "/a.jar", encodedAnswer{encodings: []string{"gzip"}, body: gz}, plain, "gzip"},
		{"x-gzip", "/a.jar", encodedAnswer{encodings: []string{"x-gzip"}, body: gz}, plain, "gzip"},
		{"gzip upper case", "/a.jar", encodedAnswer{encodings: []string{" GZIP "}, body: gz}, plain, "gzip"},
		{"gzip two members", "/a.pom", encodedAnswer{encodings: []string{"gzip"}, body: multi}, append(append([]byte{}, small...), small...), "gzip"},
		{"deflate as zlib", "/a.jar", encodedAnswer{encodings: []string{"deflate"}, body: zl}, plain, "deflate"},
		{"deflate raw", "/a.jar", encodedAnswer{encodings: []string{"deflate"}, body: fl}, plain, "deflate"},
		{"zstd", "/a.jar", encodedAnswer{encodings: []string{"zstd"}, body: zs}, plain, "zstd"},
		{"tar.gz with gzip kept", "/a-1-dist.tar.gz", encodedAnswer{encodings: []string{"gzip"}, body: gz}, gz, ""},
		{"tgz with x-gzip kept", "/a-1.tgz", encodedAnswer{encodings: []string{"x-gzip"}, body: gz}, gz, ""},
		{"gz with zstd decoded", "/a.gz", encodedAnswer{encodings: []string{"zstd"}, body: compress(t, "zstd", gz)}, gz, "zstd"},
	}
	c := local(Options{})
	answers := map[string]encodedAnswer{}
	for i, tt := range tests {
		answers["/"+strconv.Itoa(i)+tt.path] = tt.answer
	}
	url := encodedServer(t, answers)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(context.Background(), Endpoint{URL: url}, strconv.Itoa(i)+tt.path, "")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("got %d bytes; want %d", len(got), len(tt.want))
			}
			if resp.Encoding != tt.encoding {
				t.Errorf("Encoding = %q; want %q", resp.Encoding, tt.encoding)
			}
			wantLen := int64(len(tt.answer.body))
			if tt.encoding != "" {
				wantLen = -1
				if h := resp.Header.Get("Content-Encoding") + resp.Header.Get("Content-Length"); h != "" {
					t.Errorf("decoded answer keeps wire headers: %q", h)
				}
			}
			if resp.ContentLength != wantLen {
				t.Errorf("ContentLength = %d; want %d", resp.ContentLength, wantLen)
			}
		})
	}
}

func TestGetRefusesEncodings(t *testing.T) {
	tests := []struct {
		name      string
		encodings []string
		reason    string
	}{
		{"br", []string{"br"}, "sent Content-Encoding br, which registryd does not decode"},
		{"compress", []string{"compress"}, "sent Content-Encoding compress, which registryd does not decode"},
		{"list", []string{"gzip, br"}, "sent Content-Encoding gzip, br, which registryd does not decode"},
		{"two header lines", []string{"gzip", "gzip"}, "sent Content-Encoding gzip, gzip, which registryd does not decode"},
		{"identity in a list", []string{"identity, gzip"}, "sent Content-Encoding identity, gzip, which registryd does not decode"},
		{"unprintable", []string{"x\u00e9"}, "sent Content-Encoding (unreadable), which registryd does not decode"},
		{"gz file with br", []string{"br"}, "sent Content-Encoding br, which registryd does not decode"},
	}
	answers := map[string]encodedAnswer{}
	for i, tt := range tests {
		answers["/"+strconv.Itoa(i)+".tar.gz"] = encodedAnswer{encodings: tt.encodings, body: []byte("whatever")}
	}
	url := encodedServer(t, answers)
	c := local(Options{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(context.Background(), Endpoint{URL: url}, strconv.Itoa(i)+".tar.gz", "")
			if err == nil {
				resp.Body.Close()
				t.Fatal("Get succeeded")
			}
			var ae *AnswerError
			if !errors.As(err, &ae) || ae.Reason != tt.reason || !errors.Is(err, ErrBadAnswer) {
				t.Fatalf("err = %v; want *AnswerError %q", err, tt.reason)
			}
		})
	}
}

// TestGetDecodeFailures: a body that does not decode fails in Read with an
// *AnswerError, never a clean io.EOF; a transport failure under the decoder
// stays what it is.
func TestGetDecodeFailures(t *testing.T) {
	plain := payload(200 << 10)
	gz := compress(t, "gzip", plain)
	corrupt := bytes.Clone(gz)
	for i := len(corrupt) / 2; i < len(corrupt)/2+64; i++ {
		corrupt[i] ^= 0x5a
	}
	badCRC := bytes.Clone(gz)
	badCRC[len(badCRC)-6] ^= 0xff
	zl := compress(t, "zlib", plain)
	zs := compress(t, "zstd", plain)
	zsCorrupt := bytes.Clone(zs)
	for i := len(zs) / 2; i < len(zs)/2+64; i++ {
		zsCorrupt[i] ^= 0x5a
	}

	tests := []struct {
		name    string
		answer  encodedAnswer
		reason  string // *AnswerError reason, or "" for a *NetError with io.ErrUnexpectedEOF
		wantNet bool
	}{
		{"gzip corrupt mid-body", encodedAnswer{encodings: []string{"gzip"}, body: corrupt}, "gzip body could not be decoded", false},
		{"gzip bad checksum", encodedAnswer{encodings: []string{"gzip"}, body: badCRC}, "gzip body could not be decoded", false},
		{"gzip truncated stream", encodedAnswer{encodings: []string{"gzip"}, body: gz[:len(gz)/2]}, "gzip body could not be decoded", false},
		{"gzip trailing garbage", encodedAnswer{encodings: []string{"gzip"}, body: append(bytes.Clone(gz), "garbage!!!"...)}, "gzip body could not be decoded", false},
		{"not gzip at all", encodedAnswer{encodings: []string{"gzip"}, body: []byte("<html>oops</html>")}, "gzip body could not be decoded", false},
		{"empty gzip", encodedAnswer{encodings: []string{"gzip"}, body: nil}, "gzip body could not be decoded", false},
		{"zlib trailing garbage", encodedAnswer{encodings: []string{"deflate"}, body: append(bytes.Clone(zl), "garbage"...)}, "deflate body could not be decoded", false},
		{"deflate neither zlib nor raw", encodedAnswer{encodings: []string{"deflate"}, body: []byte{0xff, 0xff, 0xff, 0xff}}, "deflate body could not be decoded", false},
		{"zstd corrupt", encodedAnswer{encodings: []string{"zstd"}, body: zsCorrupt}, "zstd body could not be decoded", false},
		{"zstd truncated", encodedAnswer{encodings: []string{"zstd"}, body: zs[:len(zs)-10]}, "zstd body could not be decoded", false},
		{"gzip short body", encodedAnswer{encodings: []string{"gzip"}, body: gz[:len(gz)/2], length: len(gz)}, "", true},
		{"zlib short body after a complete stream", encodedAnswer{encodings: []string{"deflate"}, body: zl, length: len(zl) + 100}, "", true},
	}
	answers := map[string]encodedAnswer{}
	for i, tt := range tests {
		answers["/"+strconv.Itoa(i)+".jar"] = tt.answer
	}
	url := encodedServer(t, answers)
	c := local(Options{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(context.Background(), Endpoint{URL: url}, strconv.Itoa(i)+".jar", "")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			if tt.wantNet {
				var ne *NetError
				if !errors.As(err, &ne) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrBadAnswer) {
					t.Fatalf("err = %v; want a *NetError with io.ErrUnexpectedEOF", err)
				}
				return
			}
			var ae *AnswerError
			if !errors.As(err, &ae) || ae.Reason != tt.reason || errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v; want *AnswerError %q", err, tt.reason)
			}
			if _, again := resp.Body.Read(make([]byte, 10)); !errors.Is(again, ErrBadAnswer) {
				t.Fatalf("second read: %v; want the error again", again)
			}
		})
	}
}
