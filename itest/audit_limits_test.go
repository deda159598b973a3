package itest

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Audit events cannot be abused (issue 20, item 4), against the real
// daemon: a guest asking for thousands of distinct files an upstream's
// rules refuse records its budget of events and one aggregate that counts
// every other refusal; a developer and a deploy token refused during the
// flood are recorded as events of their own; the admin API lists the
// aggregate with its count.
func TestAuditDenialFloodBounded(t *testing.T) {
	// One event a minute per caller, so that the budget the guest regains
	// while the flood runs is known from its duration; the aggregate is
	// written when the daemon stops (the interval never ends in the test).
	d := Start(t, map[string]string{
		"REGISTRYD_AUDIT_CALLER_DENIALS_PER_MINUTE":   "1",
		"REGISTRYD_AUDIT_REGISTRY_DENIALS_PER_MINUTE": "10",
		"REGISTRYD_AUDIT_AGGREGATE_INTERVAL":          "1h",
	})
	f := d.Fix(t)
	group := f.Group("acme", 0, "private")
	reg := f.Registry(group, "main")
	up := newPxUpstream(t)
	uid := f.Upstream(reg, up.URL, nil)
	d.Do("POST", vr("/upstreams/%d/rules", uid), rootToken, map[string]any{"rule_type": "deny",
		"target_coordinate": "group_id", "pattern_type": "wildcard", "pattern": "com.internal*"}).Expect(t, 201)
	guestID, guestTok := f.User("guest", false, "read_virtual_registry")
	f.Member(group, guestID, guest)
	devID, devTok := f.User("dev", false, "read_virtual_registry")
	f.Member(group, devID, developer)
	deployTok := d.Do("POST", fmt.Sprintf("/groups/%d/deploy_tokens", group), rootToken,
		map[string]any{"name": "ci", "scopes": []string{"read_virtual_registry"}}).Expect(t, 201).Map(t)["token"].(string)

	const flood, workers = 2000, 4
	refused := func(hdr, token, path string) error {
		req, err := http.NewRequest(http.MethodGet, d.pxURL(reg, path), nil)
		if err != nil {
			return err
		}
		req.Header.Set(hdr, token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			return fmt.Errorf("%s: status %d, want 403", path, res.StatusCode)
		}
		return nil
	}
	jar := func(who string, i int) string {
		return fmt.Sprintf("com/internal/%s%d/1.0/%s%d-1.0.jar", who, i, who, i)
	}
	start := time.Now()
	half := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += workers {
				if err := refused("Private-Token", guestTok, jar("g", i)); err != nil {
					t.Error(err)
				}
				if i >= flood/2 {
					once.Do(func() { close(half) })
				}
			}
		}()
	}
	<-half
	for _, r := range []struct{ hdr, token, who string }{{"Private-Token", devTok, "dev"}, {"Deploy-Token", deployTok, "ci"}} {
		if err := refused(r.hdr, r.token, jar(r.who, 0)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	d.Restart() // a stop writes the open aggregates

	var evs []struct {
		AuthorID  int64          `json:"author_id"`
		EventName string         `json:"event_name"`
		Details   map[string]any `json:"details"`
	}
	d.Do("GET", fmt.Sprintf("/audit_events?entity_type=Group&entity_id=%d&per_page=100", group), rootToken, nil).
		Expect(t, 200).JSON(t, &evs)
	singles, aggregated := map[string]int{}, map[string]int{}
	aggregates := 0
	for _, ev := range evs {
		who, _ := ev.Details["author_name"].(string)
		if n, ok := ev.Details["count"].(float64); ok {
			aggregates++
			aggregated[who] += int(n)
			if ev.AuthorID != guestID || ev.EventName != "virtual_registries_packages_maven_upstream_artifact_denied" ||
				ev.Details["target_details"] != up.URL || ev.Details["first_at"] == nil || ev.Details["last_target_details"] == nil {
				t.Fatalf("aggregate %+v", ev)
			}
			continue
		}
		singles[who]++
	}
	// The guest's budget: one event, plus one per minute the flood took.
	if most := 1 + int(elapsed/time.Minute); singles["guest"] < 1 || singles["guest"] > most {
		t.Fatalf("the guest recorded %d events of their own in %v, want 1 to %d", singles["guest"], elapsed, most)
	}
	if aggregates != 1 || singles["guest"]+aggregated["guest"] != flood {
		t.Fatalf("%d aggregates counting %d refusals, and %d events of the guest's own: want one aggregate, %d refusals in all",
			aggregates, aggregated["guest"], singles["guest"], flood)
	}
	if singles["dev"] != 1 || singles["ci"] != 1 {
		t.Fatalf("refused during the flood: dev %d, deploy token %d events of their own; want 1 each", singles["dev"], singles["ci"])
	}
	if len(evs) != singles["guest"]+3 {
		t.Fatalf("%d events", len(evs))
	}
}
