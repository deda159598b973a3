// Command testsummary runs go test with -json and prints what go test
// prints without -v (a line a package, the output of failed tests), then,
// at the end, every skipped test with the message it skipped with. Plain
// go test shows a skip only with -v, and then among thousands of lines:
// `make test` runs it so that a test skipped for want of a client (mvn,
// gradle, python-gitlab, promtool) says so where it is read.
//
//	go run ./internal/testsummary [go test flags and packages]
//
// It exits with go test's status. $GO names the go command (default "go").
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

func main() {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout)
	if err := s.read(out); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
	}
	s.printSkips()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	case s.failed:
		os.Exit(1)
	}
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

// skip is a skipped test and the lines it logged (its message).
type skip struct {
	pkg, test string
	message   []string
}

type summary struct {
	w      io.Writer
	buf    map[[2]string][]string // package, test -> output lines so far
	skips  []skip
	failed bool
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, buf: map[[2]string][]string{}}
}

// read consumes the event stream, printing as go test without -v would.
// A line that is not JSON (go test's own messages) is printed as it is.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.w, "%s\n", line)
			continue
		}
		s.event(e)
	}
	// A package that never finished (go test was stopped): what it wrote.
	for key := range s.buf {
		if key[1] == "" {
			s.flush(key)
		}
	}
	return sc.Err()
}

// flush prints what a package wrote itself, but -v's "PASS".
func (s *summary) flush(key [2]string) {
	for _, l := range s.buf[key] {
		if l != "PASS\n" {
			fmt.Fprint(s.w, l)
		}
	}
	delete(s.buf, key)
}

func (s *summary) event(e event) {
	key := [2]string{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.w, e.Output)
	case e.Action == "build-fail":
		s.failed = true
	case e.Test == "":
		// The package's own lines: "ok  pkg 1.2s", "FAIL pkg", a panic, a
		// TestMain's output. As go test without -v: a package that passed
		// (or has no tests) shows its summary line only, one that failed
		// everything but -v's "PASS".
		switch e.Action {
		case "output":
			s.buf[key] = append(s.buf[key], e.Output)
		case "pass", "skip":
			for _, l := range s.buf[key] {
				if strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "?   ") {
					fmt.Fprint(s.w, l)
				}
			}
			delete(s.buf, key)
		case "fail":
			s.failed = true
			s.flush(key)
		}
	case e.Action == "output":
		s.buf[key] = append(s.buf[key], e.Output)
	case e.Action == "fail":
		s.failed = true
		for _, l := range s.buf[key] {
			if !isFrame(l) || strings.HasPrefix(strings.TrimSpace(l), "--- FAIL") {
				fmt.Fprint(s.w, l)
			}
		}
		delete(s.buf, key)
	case e.Action == "skip":
		var msg []string
		for _, l := range s.buf[key] {
			if !isFrame(l) {
				msg = append(msg, strings.TrimSpace(l))
			}
		}
		s.skips = append(s.skips, skip{pkg: e.Package, test: e.Test, message: msg})
		delete(s.buf, key)
	case e.Action == "pass":
		delete(s.buf, key)
	}
}

// isFrame reports whether a line is -v's framing (=== RUN, --- PASS, ...)
// rather than something the test logged.
func isFrame(l string) bool {
	t := strings.TrimSpace(l)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// printSkips lists the skipped tests, by package and name, each with its
// message (the file:line and text of t.Skip).
func (s *summary) printSkips() {
	if len(s.skips) == 0 {
		return
	}
	sort.SliceStable(s.skips, func(i, j int) bool {
		if s.skips[i].pkg != s.skips[j].pkg {
			return s.skips[i].pkg < s.skips[j].pkg
		}
		return s.skips[i].test < s.skips[j].test
	})
	fmt.Fprintf(s.w, "\n%d skipped:\n", len(s.skips))
	for _, k := range s.skips {
		msg := strings.Join(k.message, " ")
		if msg == "" {
			msg = "(no message)"
		}
		fmt.Fprintf(s.w, "  %s %s: %s\n", k.pkg, k.test, msg)
	}
}
