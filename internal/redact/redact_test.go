package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

const secret = "S3cr3tValue_0123456789"

// Every form a token takes in a path: as a query, a matrix parameter, a
// percent-encoded '?', '=', '_' or whole name, double encoding, any case,
// every key GitLab knows, header style, and token values by their prefix.
func TestTextRedactsEveryForm(t *testing.T) {
	base := "/api/v4/virtual_registries/packages/maven/1/com/x/a/1.0/a-1.0.jar"
	for _, tail := range []string{
		"?private_token=" + secret,
		";private_token=" + secret,
		"%3Fprivate_token=" + secret,
		"%3fprivate_token%3d" + secret,
		"%3FPRIVATE_TOKEN%3D" + secret,
		";Private_Token=" + secret,
		"%253Fprivate_token%253D" + secret, // encoded twice
		"%3Fprivate%5Ftoken=" + secret,
		"%3F%70%72%69%76%61%74%65%5F%74%6F%6B%65%6E%3D" + secret, // every byte encoded
		";job_token=" + secret,
		";JOB-TOKEN=" + secret,
		"&access_token=" + secret,
		";deploy_token=" + secret,
		"%3Bdeploy-token%3A" + secret,
		";password=" + secret,
		"/rdpat-" + secret + "/x",
		"/rddt-" + secret,
		";glpat-" + secret,
		"/RDPAT%2D" + secret,
		"?a=b&private_token=" + secret + "&c=d",
		";private_token = " + secret,
	} {
		p := base + tail
		got := Text(p)
		if strings.Contains(got, secret) || strings.Contains(got, secret[:8]) {
			t.Errorf("Text(%q) = %q: the token is still there", p, got)
		}
		if !strings.Contains(got, Mark) || !strings.HasPrefix(got, base) {
			t.Errorf("Text(%q) = %q", p, got)
		}
	}
	// Only the value goes; what follows stays.
	if got, want := Text("/a;private_token="+secret+"/b.jar?x=1"), "/a;private_token=[redacted]/b.jar?x=1"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	if got, want := Text("/a%3Fprivate_token%3D"+secret+"%26x=1"), "/a%3Fprivate_token%3D[redacted]%26x=1"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	// A segment of a dotted Maven group id starts a token or a key too; a
	// dot does not end the value (tokens may hold dots).
	for in, want := range map[string]string{
		`group_id "com.internal.glpat-` + secret + `.01.x"`: `group_id "com.internal.[redacted]"`,
		"com.internal.private_token=" + secret + "&x":       "com.internal.private_token=[redacted]&x",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

// What holds no credential comes back as it is, without an allocation.
func TestTextLeavesOthersAlone(t *testing.T) {
	for _, s := range []string{
		"/api/v4/virtual_registries/packages/maven/1/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar",
		"com/tokenizer/tokens/1.0/tokens-1.0.pom", // "token" as a word
		"org/example/a%20b/1/x.jar",
		"upstream 3: answered 404 Not Found",
		"com/birddt-x/a/1/a-1.jar", // a prefix inside a word
		"com.birddt-x.tokens",      // and in a dotted group id
		"",
	} {
		if got := Text(s); got != s {
			t.Errorf("Text(%q) = %q", s, got)
		}
	}
	p := "/api/v4/virtual_registries/packages/maven/1/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar"
	if n := testing.AllocsPerRun(100, func() { _ = Text(p) }); n != 0 {
		t.Errorf("Text of a clean path: %v allocations", n)
	}
}

func FuzzText(f *testing.F) {
	f.Add("/1/", "/a;private_token="+secret)
	f.Add("%", "%3Fprivate%5Ftoken%3D"+secret)
	f.Add("x", "%%%2")
	f.Fuzz(func(t *testing.T, prefix, s string) {
		got := Text(s) // never panics
		if !strings.Contains(s, Mark) && strings.Count(got, Mark) == 0 && got != s {
			t.Fatalf("Text(%q) = %q changed without marking", s, got)
		}
		// A token after a key, in whatever surroundings, goes.
		in := prefix + ";private_token=" + secret
		if strings.Contains(Text(in), secret) {
			t.Fatalf("Text(%q) kept the token", in)
		}
	})
}

// The handler redacts the message, string attributes, errors, groups and
// WithAttrs, and passes clean records on untouched.
func TestHandler(t *testing.T) {
	var out bytes.Buffer
	log := Logger(slog.New(slog.NewTextHandler(&out, nil)))
	if Logger(log) != log {
		t.Error("wrapping twice wrapped again")
	}
	p := "/1/a;private_token=" + secret
	log.With("req", "/x%3Fjob_token%3D"+secret).WithGroup("g").Error("failed "+p, "path", p,
		"err", errors.New("GET http://u/"+p+": 404"), slog.Group("in", "path", p), "n", 3)
	line := out.String()
	if strings.Contains(line, secret) {
		t.Fatalf("the line carries the token: %s", line)
	}
	if strings.Count(line, Mark) != 5 || !strings.Contains(line, "g.n=3") {
		t.Fatalf("line %s", line)
	}
	out.Reset()
	log.Info("clean", "path", "/1/a/b/1/b-1.jar")
	if !strings.Contains(out.String(), "path=/1/a/b/1/b-1.jar") {
		t.Fatalf("line %s", out.String())
	}
}
