package itest

import "testing"

// TestVersionRevision: GET /version names the commit the binary was built
// from, as the Makefile builds it (-X main.revision from git rev-parse),
// even where the Go toolchain records none (-buildvcs=false, a git
// worktree).
func TestVersionRevision(t *testing.T) {
	if gitRevision == "" {
		t.Skip("no git checkout to take the revision from")
	}
	d := Start(t, nil)
	ver := d.Do("GET", "/version", rootToken, nil).Expect(t, 200).Map(t)
	if ver["revision"] != gitRevision || ver["version"] != "dev" {
		t.Fatalf("GET /version: %v, want revision %s", ver, gitRevision)
	}
}
