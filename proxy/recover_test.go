package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPanicIsA500: a panic in the handler answers 500 with a request id and
// nothing internal, and the server goes on serving. fasthttp itself would
// let the panic take the whole daemon down.
func TestPanicIsA500(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 4<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	e.upstream(up.URL, nil, nil)

	first := make(chan resp, 1)
	go func() { first <- e.get(jarPath) }()
	<-up.midBody
	e.srv.onJoin = func() { panic("boom: an internal detail") }
	second := e.getNow(jarPath)
	e.srv.onJoin = nil
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
	e.get(jarPath).expect(t, 200)
}
