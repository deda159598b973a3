package main

import (
	"strings"
	"testing"
)

// A stream as go test -json writes it: a package with a pass, a skip with
// a message, a skipped subtest and a failure; a package without tests; a
// package that does not build.
const stream = `{"Action":"start","Package":"a"}
{"Action":"output","Package":"a","Output":"TestMain of a failing package\n"}
{"Action":"run","Package":"a","Test":"TestPass"}
{"Action":"output","Package":"a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"a","Test":"TestPass","Output":"    a_test.go:5: chatter of a passing test\n"}
{"Action":"output","Package":"a","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"a","Test":"TestPass"}
{"Action":"run","Package":"a","Test":"TestMvn"}
{"Action":"output","Package":"a","Test":"TestMvn","Output":"=== RUN   TestMvn\n"}
{"Action":"output","Package":"a","Test":"TestMvn","Output":"    a_test.go:9: real-client test needs the mvn command\n"}
{"Action":"output","Package":"a","Test":"TestMvn","Output":"--- SKIP: TestMvn (0.00s)\n"}
{"Action":"skip","Package":"a","Test":"TestMvn"}
{"Action":"run","Package":"a","Test":"TestTable/pg"}
{"Action":"output","Package":"a","Test":"TestTable/pg","Output":"    --- SKIP: TestTable/pg (0.00s)\n"}
{"Action":"skip","Package":"a","Test":"TestTable/pg"}
{"Action":"run","Package":"a","Test":"TestBroken"}
{"Action":"output","Package":"a","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}
{"Action":"output","Package":"a","Test":"TestBroken","Output":"    a_test.go:12: got 1, want 2\n"}
{"Action":"output","Package":"a","Test":"TestBroken","Output":"--- FAIL: TestBroken (0.00s)\n"}
{"Action":"fail","Package":"a","Test":"TestBroken"}
{"Action":"output","Package":"a","Output":"FAIL\n"}
{"Action":"output","Package":"a","Output":"FAIL\ta\t0.01s\n"}
{"Action":"fail","Package":"a"}
{"Action":"output","Package":"b","Output":"a line TestMain wrote\n"}
{"Action":"output","Package":"b","Output":"PASS\n"}
{"Action":"output","Package":"b","Output":"ok  \tb\t0.02s\n"}
{"Action":"pass","Package":"b"}
{"Action":"output","Package":"d","Output":"?   \td\t[no test files]\n"}
{"Action":"skip","Package":"d"}
{"ImportPath":"c [c.test]","Action":"build-output","Output":"c/c_test.go:3:1: syntax error\n"}
{"ImportPath":"c [c.test]","Action":"build-fail"}
go: a message of go test itself
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	s.printSkips()
	want := `    a_test.go:12: got 1, want 2
--- FAIL: TestBroken (0.00s)
TestMain of a failing package
FAIL
FAIL	a	0.01s
ok  	b	0.02s
?   	d	[no test files]
c/c_test.go:3:1: syntax error
go: a message of go test itself

2 skipped:
  a TestMvn: a_test.go:9: real-client test needs the mvn command
  a TestTable/pg: (no message)
`
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !s.failed {
		t.Error("a failed test and a failed build: want failed")
	}
}

func TestSummaryPassing(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	s.read(strings.NewReader(`{"Action":"output","Package":"b","Output":"ok  \tb\t0.02s\n"}` + "\n" + `{"Action":"pass","Package":"b"}` + "\n"))
	s.printSkips()
	if s.failed || out.String() != "ok  \tb\t0.02s\n" {
		t.Errorf("failed %v, output %q", s.failed, out.String())
	}
}
