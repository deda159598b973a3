// Package redact keeps credentials out of log lines. Clients put tokens
// where they do not belong: into the path (";private_token=...",
// "%3Fprivate_token%3D...", a token pasted as a path segment), which the
// access log and the error logs of both listeners and of the upstream client
// carry. Text finds them in any case and in percent-encoded forms, and
// Handler applies it to every string a slog record carries.
//
// What is a credential here:
//   - the value after a key whose name ends in "token" or "password"
//     (private_token, job_token, access_token, deploy_token, Private-Token,
//     ...) followed by '=' or ':', up to the next delimiter;
//   - a run that starts, at a delimiter or a '.' (a Maven group id joins
//     its path segments with dots), with the prefix of a token
//     registryd issues (rdpat-, rddt-) or of a GitLab token (glpat-, gldt-,
//     ...), which a client of GitLab may hand registryd.
//
// Matching runs on the text with its percent-escapes decoded (repeatedly,
// so %253F is '?'), ASCII case folded; what is replaced is the original
// bytes of the value, by "[redacted]".
package redact

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
)

// Mark replaces a credential.
const Mark = "[redacted]"

// keySuffixes end the names of keys whose values are credentials.
var keySuffixes = [...]string{"token", "password"}

// prefixes start credential values wherever they appear: registryd's
// personal and deploy tokens, and GitLab's (personal, deploy, CI job,
// pipeline trigger, runner, OAuth application, feed, incoming mail).
var prefixes = [...]string{"rdpat-", "rddt-", "glpat-", "gldt-", "glcbt-", "glptt-", "glrt-", "gloas-", "glft-", "glimt-"}

// delimiter ends a value and starts a prefixed token: path, query and
// matrix separators, quotes, whitespace and controls.
func delimiter(c byte) bool {
	switch c {
	case '/', ';', '&', '?', '#', ',', '"', '\'', '<', '>', '\\', '(', ')', '[', ']', '{', '}', '|':
		return true
	}
	return c <= ' ' || c == 0x7f
}

// Text returns s with every credential value replaced by Mark. s itself is
// returned, without allocating, when it holds none; the quick test for that
// allocates nothing either, so Text suits the access log's hot path.
func Text(s string) string {
	if !suspicious(s) {
		return s
	}
	d, start, end := decode(s)
	// cut are the original byte ranges of values, in order; add takes a
	// decoded range [from, to).
	var cut [][2]int
	add := func(from, to int) {
		if from >= to {
			return
		}
		lo, hi := start[from], end[to-1]
		if n := len(cut); n > 0 && lo <= cut[n-1][1] {
			cut[n-1][1] = max(cut[n-1][1], hi)
			return
		}
		cut = append(cut, [2]int{lo, hi})
	}
	for i := 0; i < len(d); {
		if n := keyAt(d, i); n > 0 {
			j := i + n
			for j < len(d) && d[j] == ' ' {
				j++
			}
			v := j
			for v < len(d) && !delimiter(d[v]) {
				v++
			}
			add(j, v)
			i = max(v, i+1)
			continue
		}
		if n := prefixAt(d, i); n > 0 {
			v := i
			for v < len(d) && !delimiter(d[v]) && d[v] != '=' && d[v] != ':' {
				v++
			}
			add(i, v)
			i = v
			continue
		}
		i++
	}
	if len(cut) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, c := range cut {
		b.WriteString(s[last:c[0]])
		b.WriteString(Mark)
		last = c[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// suspicious reports whether s may hold a credential: a percent-escape, a
// key suffix or a token prefix, ignoring case. It allocates nothing.
func suspicious(s string) bool {
	for i := 0; i < len(s); i++ {
		switch lower(s[i]) {
		case '%':
			return true
		case 't':
			if hasFold(s[i:], "token") {
				return true
			}
		case 'p':
			if hasFold(s[i:], "password") {
				return true
			}
		case 'r', 'g':
			for _, p := range prefixes {
				if hasFold(s[i:], p) {
					return true
				}
			}
		}
	}
	return false
}

// decode percent-decodes s until no escape is left (at most 4 rounds),
// lower-casing ASCII; start[i] and end[i] are the bytes of s that decoded
// byte i came from.
func decode(s string) (d []byte, start, end []int) {
	d = make([]byte, len(s))
	start, end = make([]int, len(s)), make([]int, len(s))
	for i := range len(s) {
		d[i], start[i], end[i] = lower(s[i]), i, i+1
	}
	for range 4 {
		changed := false
		n := 0
		for i := 0; i < len(d); i++ {
			if d[i] == '%' && i+2 < len(d) {
				if hi, ok := unhex(d[i+1]); ok {
					if lo, ok := unhex(d[i+2]); ok {
						d[n], start[n], end[n] = lower(hi<<4|lo), start[i], end[i+2]
						n, i, changed = n+1, i+2, true
						continue
					}
				}
			}
			d[n], start[n], end[n] = d[i], start[i], end[i]
			n++
		}
		d, start, end = d[:n], start[:n], end[:n]
		if !changed {
			break
		}
	}
	return d, start, end
}

// startsAfter reports whether a key or a token may start after c: a
// delimiter, or '.', which joins the segments of a Maven group id
// ("com.acme.glpat-..." is the path "com/acme/glpat-..." as a coordinate).
// A '.' does not end a value: tokens may hold dots.
func startsAfter(c byte) bool { return delimiter(c) || c == '.' }

// keyAt is the length of a credential key and its '=' or ':' (spaces
// allowed before it) starting at d[i] (lower case), or 0. A key is a run of
// letters, digits, '_' and '-' that starts at a delimiter or '.' (or where
// the text starts) and ends in one of keySuffixes.
func keyAt(d []byte, i int) int {
	if i > 0 && !startsAfter(d[i-1]) && d[i-1] != '=' {
		return 0
	}
	j := i
	for j < len(d) && keyByte(d[j]) {
		j++
	}
	ok := false
	for _, suf := range keySuffixes {
		ok = ok || bytes.HasSuffix(d[i:j], []byte(suf)) // d is lower case already
	}
	if !ok {
		return 0
	}
	for j < len(d) && d[j] == ' ' {
		j++
	}
	if j < len(d) && (d[j] == '=' || d[j] == ':') {
		return j + 1 - i
	}
	return 0
}

// prefixAt is the length of a token prefix at d[i] (lower case), after a
// delimiter or '.' or where the text starts, or 0.
func prefixAt(d []byte, i int) int {
	if i > 0 && !startsAfter(d[i-1]) && d[i-1] != '=' && d[i-1] != ':' {
		return 0
	}
	for _, p := range prefixes {
		if len(d)-i > len(p) && string(d[i:i+len(p)]) == p {
			return len(p)
		}
	}
	return 0
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasFold reports whether s starts with p (lower case), ignoring ASCII case.
func hasFold(s, p string) bool {
	if len(s) < len(p) {
		return false
	}
	for i := 0; i < len(p); i++ {
		if lower(s[i]) != p[i] {
			return false
		}
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false // d is lower case: 'A'-'F' are folded already
}

// Handler wraps h so that no record it writes carries a credential: the
// message and every string attribute (errors and Stringers by their text,
// groups and attributes given to WithAttrs included) go through Text.
// Wrapping a Handler again returns it as it is.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(*handler); ok {
		return h
	}
	return &handler{h: h}
}

// Logger is slog.New(Handler(l.Handler())); nil stays nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(*handler); ok {
		return l
	}
	return slog.New(Handler(l.Handler()))
}

type handler struct{ h slog.Handler }

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	changed := false
	msg := Text(r.Message)
	changed = msg != r.Message
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		ra, c := attr(a)
		attrs = append(attrs, ra)
		changed = changed || c
		return true
	})
	if !changed {
		return h.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, msg, r.PC)
	out.AddAttrs(attrs...)
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i], _ = attr(a)
	}
	return &handler{h: h.h.WithAttrs(out)}
}

func (h *handler) WithGroup(name string) slog.Handler { return &handler{h: h.h.WithGroup(name)} }

// attr redacts one attribute, and says whether it changed.
func attr(a slog.Attr) (slog.Attr, bool) {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := Text(v.String()); s != v.String() {
			return slog.String(a.Key, s), true
		}
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		changed := false
		for i, ga := range g {
			var c bool
			out[i], c = attr(ga)
			changed = changed || c
		}
		if changed {
			return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}, true
		}
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case interface{ String() string }:
			text = x.String()
		default:
			return a, false
		}
		if s := Text(text); s != text {
			return slog.String(a.Key, s), true
		}
	}
	return a, false
}
