package itest

// The secret check: every credential the suite uses is collected here
// (the root token, every token the API creates, every upstream password,
// the gateway secret and the JWTs signed with it, whatever travels in a
// credential header) and, after the whole run, every daemon's complete
// debug-level log is searched for each. One hit fails the run: nothing
// secret is ever logged, at any level.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// minSecretLen is the shortest value searched for: a shorter one would
// match ordinary text. The suite's credentials are all longer; shorter
// ones (a one-letter password in a refused request) are counted as skipped.
const minSecretLen = 8

var secrets = struct {
	mu      sync.Mutex
	what    map[string]string // value -> what it is
	skipped int
}{what: map[string]string{}}

// registerSecret registers value as a credential that must never appear in a
// daemon's log and returns it.
func registerSecret(what, value string) string {
	if value == "" {
		return value
	}
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	if len(value) < minSecretLen {
		secrets.skipped++
		return value
	}
	if _, ok := secrets.what[value]; !ok {
		secrets.what[value] = what
	}
	return value
}

// secretsInEnv registers the credentials a daemon is started with.
func secretsInEnv(env map[string]string) {
	for k, v := range env {
		if strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") || strings.Contains(k, "PASSWORD") ||
			strings.HasSuffix(k, "_KEY") {
			registerSecret(k, v)
		}
	}
}

// credentialHeaders are the request headers that carry a credential.
var credentialHeaders = []string{"Private-Token", "Deploy-Token", "Job-Token", "Authorization", "Svc-Gateway-Api-Request"}

// secretsInRequest registers the passwords in a request body (the admin
// API takes upstream passwords as "password") and the credential headers.
func secretsInRequest(body any, h http.Header) {
	var m map[string]any
	switch b := body.(type) {
	case map[string]any:
		m = b
	case string:
		_ = json.Unmarshal([]byte(b), &m)
	case []byte:
		_ = json.Unmarshal(b, &m)
	}
	if pw, ok := m["password"].(string); ok {
		registerSecret("upstream password", pw)
	}
	for _, name := range credentialHeaders {
		v := h.Get(name)
		if name == "Authorization" {
			scheme, cred, _ := strings.Cut(v, " ")
			registerSecret("Authorization credentials", cred)
			if strings.EqualFold(scheme, "Basic") {
				if raw, err := base64.StdEncoding.DecodeString(cred); err == nil {
					_, pass, _ := strings.Cut(string(raw), ":")
					registerSecret("Basic password", pass)
				}
			}
			continue
		}
		registerSecret(name+" header", v)
	}
}

// secretsInAnswer registers the token an API answer hands out (personal
// access, deploy, group or project tokens, created or rotated).
func secretsInAnswer(method, path string, body []byte) {
	if !bytes.Contains(body, []byte(`"token"`)) {
		return
	}
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return
	}
	if tok, ok := m["token"].(string); ok {
		registerSecret("token from "+method+" "+path, tok)
	}
}

var logSeq atomic.Int64

// keptLog is a file in logDir for one daemon run of test t.
func keptLog(t testing.TB) *os.File {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, t.Name())
	f, err := os.Create(filepath.Join(logDir, fmt.Sprintf("%04d-%s.log", logSeq.Add(1), name)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// keepOutput keeps the output of a daemon run that did not go through
// Start (a refused start, a command).
func keepOutput(t testing.TB, out ...string) {
	t.Helper()
	f := keptLog(t)
	defer f.Close()
	for _, o := range out {
		if _, err := io.WriteString(f, o); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSecrets searches every log in dir for every registered secret,
// reports each hit to w (the secret masked) and returns how many secrets
// leaked.
func checkSecrets(w io.Writer, dir string) int {
	secrets.mu.Lock()
	values := make([]string, 0, len(secrets.what))
	for v := range secrets.what {
		values = append(values, v)
	}
	skipped := secrets.skipped
	secrets.mu.Unlock()
	slices.Sort(values)

	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		fmt.Fprintln(w, "secret check:", err)
		return 1
	}
	leaked := map[string]bool{}
	var size int64
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintln(w, "secret check:", err)
			return 1
		}
		size += int64(len(raw))
		for _, v := range values {
			if !bytes.Contains(raw, []byte(v)) {
				continue
			}
			leaked[v] = true
			shown := 0
			sc := bufio.NewScanner(bytes.NewReader(raw))
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			for n := 1; sc.Scan() && shown < 3; n++ {
				line := sc.Text()
				if !strings.Contains(line, v) {
					continue
				}
				shown++
				fmt.Fprintf(w, "secret check: %s (%s) leaked into %s:%d: %s\n",
					secrets.what[v], mask(v), filepath.Base(name), n, cutAround(strings.ReplaceAll(line, v, "[SECRET]"), 400))
			}
		}
	}
	fmt.Fprintf(w, "secret check: %d credentials searched for in %d daemon logs (%.1f MB, debug level); %d too short to search; %d leaked\n",
		len(values), len(files), float64(size)/1e6, skipped, len(leaked))
	return len(leaked)
}

// mask shows a secret's first characters and its length, never the whole.
func mask(v string) string {
	return fmt.Sprintf("%q... (%d characters)", v[:min(4, len(v)/4)], len(v))
}

// cutAround shortens a long line around its first [SECRET].
func cutAround(line string, n int) string {
	if len(line) <= n {
		return line
	}
	i := max(strings.Index(line, "[SECRET]")-n/2, 0)
	j := min(i+n, len(line))
	return "..." + line[i:j] + "..."
}
