package itest

import "testing"

// TestQuickStart walks the README's quick start: root token, group, registry,
// upstream, and the health endpoints.
func TestQuickStart(t *testing.T) {
	d := Start(t, nil)
	d.Do("GET", "/-/readiness", "", nil).Expect(t, 200)
	d.Do("GET", "/-/health", "", nil).Expect(t, 200)
	d.Do("GET", "/-/liveness", "", nil).Expect(t, 200)
	me := d.Do("GET", "/user", rootToken, nil).Expect(t, 200).Map(t)
	if me["username"] != "root" || me["is_admin"] != true {
		t.Fatalf("GET /user = %v", me)
	}
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	reg := f.Registry(g, "main")
	up := f.Upstream(reg, "http://127.0.0.1:1/maven2", nil)
	got := d.Do("GET", "/virtual_registries/packages/maven/upstreams/"+itoa(up), rootToken, nil).Expect(t, 200).Map(t)
	if got["url"] != "http://127.0.0.1:1/maven2" || got["name"] != "127.0.0.1" {
		t.Fatalf("upstream = %v", got)
	}
}
