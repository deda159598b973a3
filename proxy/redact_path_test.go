package proxy

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"registryd/internal/testlog"
)

// envLoggers gives a test's env the daemon log it is built with (newEnv).
var envLoggers sync.Map // testing.TB -> *slog.Logger

// A token a client writes into the path, in any form (a matrix or query
// parameter, percent-encoded, any case, any key, a token as a segment), is
// in neither the access log nor the daemon's log lines that carry the path
// (here an upstream answer refused, a warning with the path), in text and
// JSON: each line shows [redacted] where the value was.
func TestTokensInPathsRedacted(t *testing.T) {
	const secret = "Tok3nValue0123456789abcdef"
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var daemon testlog.Buffer
			envLoggers.Store(t, slog.New(slog.NewTextHandler(&daemon, &slog.HandlerOptions{Level: slog.LevelDebug})))
			defer envLoggers.Delete(t)
			path := filepath.Join(t.TempDir(), "access.log")
			e := newEnv(t, func(o *envOptions) { o.accessLogPath = path; o.Listener.AccessLogJSON = format == "json" })
			up := newFakeUpstream(t)
			e.upstream(up.URL, nil, nil)
			reg := "/" + strconv.FormatInt(e.registry, 10) + "/"
			const jar = "com/x/a/1.0/a-1.0.jar"
			// Paths the parser refuses (400) and paths it takes, which
			// reach the upstream: '&' and '=' are allowed in Maven paths.
			for _, p := range []string{
				jar + ";private_token=" + secret,
				jar + ";PRIVATE_TOKEN=" + secret,
				jar + "%3Fprivate_token%3D" + secret,
				jar + "%3fPrivate%5FToken=" + secret,
				jar + "%253Fprivate_token%253D" + secret,
				jar + "%3Bjob_token%3D" + secret,
				jar + ";access_token=" + secret,
				jar + ";deploy_token=" + secret,
				"com/x/a/1.0/a-1.0.jar&private_token=" + secret,
				"com/x/rdpat-" + secret + "/1.0/x.jar",
			} {
				up.set(p, fakeFile{body: []byte("<html>login</html>"), ctype: "text/html"})
				e.do("GET", reg+p, nil, "Private-Token", rootToken)
			}
			e.waitFills()
			var raw []byte
			deadline := time.Now().Add(10 * time.Second)
			for {
				raw, _ = os.ReadFile(path)
				if bytes.Count(raw, []byte("\n")) >= 10 || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if n := bytes.Count(raw, []byte("\n")); n != 10 {
				t.Fatalf("%d access lines, want 10:\n%s", n, raw)
			}
			if bytes.Contains(raw, []byte(secret)) || bytes.Count(raw, []byte("[redacted]")) != 10 {
				t.Fatalf("the access log:\n%s", raw)
			}
			logged := daemon.String()
			if strings.Contains(logged, secret) {
				t.Fatalf("the daemon log carries a token:\n%s", logged)
			}
			if !strings.Contains(logged, "upstream answer refused") || !strings.Contains(logged, "[redacted]") {
				t.Fatalf("no refusal logged with its path:\n%s", logged)
			}
		})
	}
}
