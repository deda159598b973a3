package itest

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"
)

// docBlock is a fenced block of a document that the tests run, marked by an
// HTML comment "<!-- NAME ARG... -->" on a line before its opening fence
// (blank lines between are allowed): the README's quick start, the
// scale-out recipe.
type docBlock struct {
	args []string // the marker's words after NAME
	line int      // of the opening fence, for messages
	text string
}

// readDocBlocks returns the blocks of file marked with name, in order. A
// marker not followed by a fence, a malformed marker or an unclosed block
// fails t, naming file and line.
func readDocBlocks(t *testing.T, file, name string) []docBlock {
	t.Helper()
	marker := regexp.MustCompile(`^<!--\s*` + regexp.QuoteMeta(name) + `((?:\s+[^\s-][^\s]*)+)\s*-->\s*$`)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks  []docBlock
		pending *docBlock // marker seen, fence not yet
		inside  *docBlock
		body    strings.Builder
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case inside != nil:
			if strings.TrimSpace(line) == "```" {
				inside.text = body.String()
				blocks = append(blocks, *inside)
				inside = nil
				continue
			}
			body.WriteString(line + "\n")
		case pending != nil:
			switch {
			case strings.HasPrefix(line, "```"):
				pending.line = n
				inside, pending = pending, nil
				body.Reset()
			case strings.TrimSpace(line) != "":
				t.Fatalf("%s:%d: a %s marker must be followed by a fenced block, got %q", file, n, name, line)
			}
		default:
			if m := marker.FindStringSubmatch(line); m != nil {
				pending = &docBlock{args: strings.Fields(m[1])}
			} else if strings.HasPrefix(strings.TrimSpace(line), "<!--") && strings.Contains(line, name) {
				t.Fatalf("%s:%d: a malformed %s marker: %q", file, n, name, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if pending != nil || inside != nil {
		t.Fatalf("%s: the last %s block is not closed", file, name)
	}
	return blocks
}
