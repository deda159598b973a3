package sbom

import (
	"slices"
	"testing"
)

func TestSrcFileRoot(t *testing.T) {
	tests := []struct {
		name string
		srcs []string
		want []string
	}{
		{"one lockfile", []string{"/home/ci/app/yarn.lock"}, []string{"yarn.lock"}},
		{"relative to the temp dir", []string{"w4/app/go.mod"}, []string{"go.mod"}},
		{"a monorepo", []string{"/r/web/yarn.lock", "/r/api/go.mod", "/r/api/tools/go.mod"},
			[]string{"web/yarn.lock", "api/go.mod", "api/tools/go.mod"}},
		{"windows", []string{`C:\src\app\package-lock.json`}, []string{"package-lock.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r srcRoot
			for _, s := range tt.srcs {
				r.add(s)
			}
			root := r.String()
			var got []string
			for _, s := range tt.srcs {
				got = append(got, relativeTo(root, s))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("root %q: %q, want %q", root, got, tt.want)
			}
		})
	}
}
