package itest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPackagesList checks .ci/packages, the one list of the Debian packages
// the tests and the quick start use: every line names a package, where it
// is needed and why; .ci/run installs what the file lists (with apt's lock
// timeout), the README's install lines read the file rather than list
// packages of their own, and the awk programs they run select what they
// claim to.
func TestPackagesList(t *testing.T) {
	root := filepath.Join("..")
	raw, err := os.ReadFile(filepath.Join(root, ".ci/packages"))
	if err != nil {
		t.Fatal(err)
	}
	var all, quick []string
	for i, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Errorf(".ci/packages:%d: want \"package where why\", got %q", i+1, line)
			continue
		}
		switch f[1] {
		case "quickstart":
			quick = append(quick, f[0])
		case "test", "cluster", "bench":
		default:
			t.Errorf(".ci/packages:%d: %q is not quickstart, test, cluster or bench", i+1, f[1])
		}
		all = append(all, f[0])
	}
	for _, need := range []string{"default-jdk-headless", "gcc", "maven", "python3-gitlab", "postgresql", "strace", "nginx", "wrk"} {
		if !strings.Contains(" "+strings.Join(all, " ")+" ", " "+need+" ") {
			t.Errorf(".ci/packages lacks %s", need)
		}
	}

	run, err := os.ReadFile(filepath.Join(root, ".ci/run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".ci/packages", "-o DPkg::Lock::Timeout=300 update", "-o DPkg::Lock::Timeout=300 install"} {
		if !strings.Contains(string(run), want) {
			t.Errorf(".ci/run does not contain %q", want)
		}
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(readme), "apt-get install maven") {
		t.Error("README.md lists packages of its own; its install lines must read .ci/packages")
	}
	awk := regexp.MustCompile(`apt-get (?:-o DPkg::Lock::Timeout=300 )?install \$\(awk '([^']+)' \.ci/packages\)`)
	progs := awk.FindAllStringSubmatch(string(readme), -1)
	if len(progs) != 2 {
		t.Fatalf("README.md: want 2 install lines reading .ci/packages (all, quick start), found %d", len(progs))
	}
	if _, err := exec.LookPath("awk"); err != nil {
		t.Skip("no awk to run the README's install lines")
	}
	for i, want := range [][]string{all, quick} {
		out, err := exec.Command("awk", progs[i][1], filepath.Join(root, ".ci/packages")).Output()
		if err != nil {
			t.Fatalf("awk %q: %v", progs[i][1], err)
		}
		if got := strings.Fields(string(out)); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("README's install line %d (awk %q) installs %v, want %v", i+1, progs[i][1], got, want)
		}
	}
}
