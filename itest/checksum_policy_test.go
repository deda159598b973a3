package itest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestChecksumPolicyAPI: the per-upstream checksum_policy goes through the
// real daemon: shown on every upstream answer as the override or null, set on
// create, changed, cleared with null or "" on PATCH, refused when unknown.
// The global default (here require, from the environment) is not copied into
// upstreams that follow it.
func TestChecksumPolicyAPI(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY": "require"})
	f := d.Fix(t)
	group := f.Group("acme", 0, "private")
	reg := f.Registry(group, "main")
	create := vr("/registries/%d/upstreams", reg)

	r := d.Do("POST", create, rootToken, map[string]any{"url": "http://127.0.0.1:9/a", "checksum_policy": "off"}).Expect(t, 201)
	if string(jsonField(t, r.Body, "checksum_policy")) != `"off"` {
		t.Fatalf("create answered %s", r.Body)
	}
	withOverride := r.ID(t)
	plain := d.Do("POST", create, rootToken, map[string]any{"url": "http://127.0.0.1:9/b"}).Expect(t, 201)
	if string(jsonField(t, plain.Body, "checksum_policy")) != "null" {
		t.Fatalf("an upstream without override answered %s", plain.Body)
	}

	// Every rendering shows it.
	one := d.Do("GET", vr("/upstreams/%d", withOverride), rootToken, nil).Expect(t, 200)
	if string(jsonField(t, one.Body, "checksum_policy")) != `"off"` {
		t.Fatalf("GET upstream: %s", one.Body)
	}
	for _, path := range []string{vr("/registries/%d/upstreams", reg), groupVR(group, "/upstreams")} {
		items := jsonItems(t, d.Do("GET", path, rootToken, nil).Expect(t, 200).Body)
		if len(items) != 2 || string(jsonField(t, items[0], "checksum_policy")) != `"off"` ||
			string(jsonField(t, items[1], "checksum_policy")) != "null" {
			t.Fatalf("GET %s: %q", path, items)
		}
	}

	// PATCH: set, clear with null, set, clear with "", refuse an unknown value.
	patch := vr("/upstreams/%d", withOverride)
	for _, step := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"checksum_policy":"require"}`, 200, `"require"`},
		{`{"checksum_policy":null}`, 200, "null"},
		{`{"checksum_policy":"verify"}`, 200, `"verify"`},
		{`{"checksum_policy":""}`, 200, "null"},
		{`{"checksum_policy":"paranoid"}`, 400, ""},
	} {
		r := d.Do("PATCH", patch, rootToken, step.body)
		if step.status == 400 {
			wantResp(t, r, 400, `{"message":{"checksum_policy":["is invalid"]}}`)
			continue
		}
		wantResp(t, r, step.status, "")
		if got := string(jsonField(t, r.Body, "checksum_policy")); got != step.want {
			t.Fatalf("PATCH %s: checksum_policy %s, want %s", step.body, got, step.want)
		}
	}
	wantResp(t, d.Do("POST", create, rootToken, map[string]any{"url": "http://127.0.0.1:9/c", "checksum_policy": "sometimes"}),
		400, `{"message":{"checksum_policy":["is invalid"]}}`)

	// It survives a restart.
	d.Do("PATCH", patch, rootToken, `{"checksum_policy":"off"}`).Expect(t, 200)
	d.Restart()
	if got := string(jsonField(t, d.Do("GET", vr("/upstreams/%d", withOverride), rootToken, nil).Expect(t, 200).Body, "checksum_policy")); got != `"off"` {
		t.Fatalf("after a restart: %s", got)
	}
	noServerErrors(t, d)
}

// TestChecksumPolicyConfigRefused: an unknown global policy stops the daemon
// before it listens, naming the setting.
func TestChecksumPolicyConfigRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"REGISTRYD_DATA_DIR=" + t.TempDir(),
		"REGISTRYD_PROXY_LISTEN=127.0.0.1:0", "REGISTRYD_ADMIN_LISTEN=127.0.0.1:0",
		"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY=strict"}
	out, err := cmd.CombinedOutput()
	keepOutput(t, string(out))
	if err == nil {
		t.Fatalf("registryd started with checksum_policy strict:\n%s", out)
	}
	if !strings.Contains(string(out), `upstreams.checksum_policy (REGISTRYD_UPSTREAMS_CHECKSUM_POLICY): "strict" must be verify, require or off`) {
		t.Fatalf("the refusal does not name the setting:\n%s", out)
	}
}
