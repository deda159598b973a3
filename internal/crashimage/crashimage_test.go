package crashimage

import (
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// x is s as strace -xx prints it.
func x(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		b.WriteString(`\x` + hex.EncodeToString([]byte{c}))
	}
	return b.String()
}

// fd is a descriptor annotated with its path, as -y prints it.
func fd(n, path string) string { return n + "<" + x(path) + ">" }

const root = "/data"

// trace is a run: a blob written, fsynced, renamed into a new directory
// (whose parent is fsynced), then the index written in two halves.
var trace = strings.Join([]string{
	`10 1.0 mkdirat(AT_FDCWD<` + x("/") + `>, "` + x("/data/blobs") + `", 0750) = 0`,
	`10 1.1 openat(AT_FDCWD<` + x("/") + `>, "` + x("/data/tmp-1") + `", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 5<` + x("/data/tmp-1") + `>`,
	`10 1.2 write(` + fd("5", "/data/tmp-1") + `, "` + x("hello") + `", 5) = 5`,
	`11 1.25 write(` + fd("7", "socket:[1]") + `, "` + x("HTTP/1.1 200") + `", 12) = 12`,
	`10 1.3 fsync(` + fd("5", "/data/tmp-1") + ` <unfinished ...>`,
	`11 1.31 write(` + fd("7", "socket:[1]") + `, "` + x("x") + `", 1) = 1`,
	`10 1.32 <... fsync resumed>) = 0`,
	`10 1.4 renameat(AT_FDCWD<` + x("/") + `>, "` + x("/data/tmp-1") + `", AT_FDCWD<` + x("/") + `>, "` + x("/data/blobs/b1") + `") = 0`,
	`10 1.5 openat(AT_FDCWD<` + x("/") + `>, "` + x("/data/blobs") + `", O_RDONLY|O_CLOEXEC) = 6<` + x("/data/blobs") + `>`,
	`10 1.6 fsync(` + fd("6", "/data/blobs") + `) = 0`,
	`10 1.7 openat(AT_FDCWD<` + x("/") + `>, "` + x("/data/index") + `", O_RDWR|O_CREAT|O_CLOEXEC, 0600) = 8<` + x("/data/index") + `>`,
	`10 1.8 pwrite64(` + fd("8", "/data/index") + `, "` + x("AAAA") + `", 4, 0) = 4`,
	`10 1.9 fdatasync(` + fd("8", "/data/index") + `) = 0`,
	`10 2.0 pwrite64(` + fd("8", "/data/index") + `, "` + x("BB") + `", 2, 4) = 2`,
	`10 2.1 openat(AT_FDCWD<` + x("/") + `>, "` + x("/data/nothing") + `", O_RDONLY) = -1 ENOENT (No such file or directory)`,
	`10 2.2 openat(AT_FDCWD<` + x("/") + `>, "` + x("/data") + `", O_RDONLY|O_CLOEXEC) = 9<` + x("/data") + `>`,
	`10 2.3 fsync(` + fd("9", "/data") + `) = 0`,
	`10 2.4 +++ exited with 0 +++`,
}, "\n")

func parse(t *testing.T, s string) []Op {
	t.Helper()
	ops, err := Parse(strings.NewReader(s), root)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// imageAfter replays ops up to and including line and returns the image's
// files (path -> contents; directories end in /).
func imageAfter(t *testing.T, ops []Op, line int, strict bool, torn *rand.Rand) map[string]string {
	t.Helper()
	m := New(root, strict)
	for _, op := range ops {
		if op.Line > line {
			break
		}
		if err := m.Apply(op); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := m.Image(dir, torn); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".":
		case d.IsDir():
			got[rel+"/"] = ""
		default:
			raw, _ := os.ReadFile(p)
			got[rel] = string(raw)
		}
		return nil
	})
	return got
}

func TestParseKeepsFileCallsUnderRoot(t *testing.T) {
	ops := parse(t, trace)
	var kinds []string
	for _, op := range ops {
		kinds = append(kinds, op.Kind.String())
	}
	// The socket writes, the failed open and the exit are left out; the
	// unfinished fsync is read whole at its resumption.
	want := "mkdir open write sync rename open sync open write sync write open sync"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
	if ops[3].Path != "/data/tmp-1" || ops[3].Time != 1.3 {
		t.Fatalf("resumed fsync: %+v", ops[3])
	}
	if ops[8].Off != 0 || string(ops[8].Data) != "AAAA" {
		t.Fatalf("pwrite64: %+v", ops[8])
	}
}

func TestStrictImageNeedsTheDirectorySync(t *testing.T) {
	ops := parse(t, trace)
	// After the blob's rename but before its directory's fsync: the
	// rename is lost, and so is the temp name (its directory, the root,
	// was never synced), and so is blobs/.
	if got := imageAfter(t, ops, 8, true, nil); len(got) != 0 {
		t.Fatalf("strict image before any directory sync: %v", got)
	}
	// blobs/ is synced (so b1 is in it) but the root is not: blobs/
	// itself is not there yet.
	if got := imageAfter(t, ops, 10, true, nil); len(got) != 0 {
		t.Fatalf("strict image before the root's sync: %v", got)
	}
	// After the root's sync: blobs/b1 whole, the index as of its
	// fdatasync (the later "BB" lost).
	got := imageAfter(t, ops, 17, true, nil)
	if got["blobs/b1"] != "hello" || got["index"] != "AAAA" || len(got) != 3 {
		t.Fatalf("strict image at the end: %v", got)
	}
}

func TestOrderedImageKeepsNamesLosesUnsyncedBytes(t *testing.T) {
	ops := parse(t, trace)
	// Names survive in order; the blob's bytes were fsynced before its
	// rename, the index's second write never was.
	got := imageAfter(t, ops, 14, false, nil)
	if got["blobs/b1"] != "hello" || got["index"] != "AAAA" {
		t.Fatalf("ordered image: %v", got)
	}
	// Before the blob's fsync its file exists, empty.
	if got := imageAfter(t, ops, 3, false, nil); got["tmp-1"] != "" || len(got) != 2 {
		t.Fatalf("ordered image before the fsync: %v", got)
	}
}

func TestTornImageKeepsSomeUnsyncedWrites(t *testing.T) {
	ops := parse(t, trace)
	seen := map[string]bool{}
	for seed := range uint64(32) {
		got := imageAfter(t, ops, 14, false, rand.New(rand.NewPCG(seed, 1)))
		seen[got["index"]] = true
	}
	if !seen["AAAA"] || !seen["AAAABB"] || len(seen) != 2 {
		t.Fatalf("torn index contents over 32 seeds: %v", seen)
	}
}

func TestParseRefusesWhatItCannotReplay(t *testing.T) {
	for name, line := range map[string]string{
		"a write strace cut":           `10 1.0 write(` + fd("5", "/data/f") + `, "` + x("hel") + `"..., 5) = 5`,
		"a splice into a file":         `10 1.0 splice(` + fd("4", "socket:[2]") + `, NULL, ` + fd("5", "/data/f") + `, NULL, 100, 0) = 100`,
		"a vectored write":             `10 1.0 writev(` + fd("5", "/data/f") + `, [{iov_base="` + x("a") + `", iov_len=1}], 1) = 1`,
		"a resumption without a start": `10 1.0 <... fsync resumed>) = 0`,
	} {
		if _, err := Parse(strings.NewReader(line), root); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Outside root the same calls are of no concern.
	if ops := parse(t, `10 1.0 splice(`+fd("4", "socket:[2]")+`, NULL, `+fd("5", "/elsewhere/f")+`, NULL, 100, 0) = 100`); len(ops) != 0 {
		t.Fatalf("ops outside root: %v", ops)
	}
}

func TestModelRefusesAWriteToAnUnknownDescriptor(t *testing.T) {
	m := New(root, true)
	if err := m.Apply(Op{Kind: Write, FD: 3, Path: "/data/f", Off: -1, Data: []byte("x")}); err == nil {
		t.Fatal("no error")
	}
}
