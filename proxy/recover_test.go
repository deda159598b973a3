package proxy

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"registryd/internal/testlog"
)

// TestPanicIsA500: a panic in the handler answers 500 with a request id and
// nothing internal, and the server goes on serving. fasthttp itself would
// let the panic take the whole daemon down. The log line with that request
// id has the panic and the stack where it happened.
func TestPanicIsA500(t *testing.T) {
	e := newEnv(t)
	logs := &testlog.Recorder{}
	e.srv.log = slog.New(logs)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 4<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	e.upstream(up.URL, nil, nil)

	first := make(chan resp, 1)
	go func() { first <- e.get(jarPath) }()
	<-up.midBody
	e.hooks.OnJoin = func() { panic("boom: an internal detail") }
	second := e.getNow(jarPath)
	e.hooks.OnJoin = nil
	up.releaseHeld()
	if r := <-first; r.status != 200 || string(r.body) != string(body) {
		t.Fatalf("the fill's own request: %d, %d bytes", r.status, len(r.body))
	}
	if second.status != 500 {
		t.Fatalf("a panicking request: status %d, want 500: %s", second.status, second.body)
	}
	var msg map[string]string
	if err := json.Unmarshal(second.body, &msg); err != nil || msg["message"] != "500 Internal Server Error" || msg["request_id"] == "" {
		t.Fatalf("500 body = %s", second.body)
	}
	if strings.Contains(string(second.body), "boom") {
		t.Fatalf("the 500 shows the panic: %s", second.body)
	}
	var line string
	for _, l := range logs.Lines() {
		if strings.Contains(l, "req_id="+msg["request_id"]) {
			line = l
		}
	}
	// The stack names the frames that panicked: the hook, called by join.
	if !strings.HasPrefix(line, "ERROR proxy request failed") || !strings.Contains(line, "boom: an internal detail") ||
		!strings.Contains(line, "stack=goroutine") || !strings.Contains(line, "(*engine).join") ||
		!strings.Contains(line, "TestPanicIsA500") {
		t.Fatalf("the log line of request %s: %q", msg["request_id"], line)
	}
	e.get(jarPath).expect(t, 200)
}
