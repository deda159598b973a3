package itest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pythonWithGitlab finds a Python that can import python-gitlab: $REGISTRYD_TEST_PYTHON
// when set, then Debian's /usr/bin/python3 (where the python3-gitlab
// package installs it, whatever python3 comes first on PATH), then python3.
// Without one the test is skipped, except in CI (CI=true), where .ci/run
// installs python3-gitlab and a skip would hide a missing client.
func pythonWithGitlab(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, py := range []string{os.Getenv("REGISTRYD_TEST_PYTHON"), "/usr/bin/python3", "python3"} {
		if py == "" {
			continue
		}
		out, err := exec.Command(py, "-c", "import gitlab; print(gitlab.__version__)").CombinedOutput()
		if err == nil {
			t.Logf("%s has python-gitlab %s", py, strings.TrimSpace(string(out)))
			return py
		}
		tried = append(tried, fmt.Sprintf("%s: %v", py, err))
	}
	msg := "python-gitlab is not importable (" + strings.Join(tried, "; ") +
		"); on Debian: apt-get install python3-gitlab"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (.ci/run installs it: CI must not skip this test)")
	}
	t.Skip(msg)
	return ""
}

// freeLoopbackAddr is a loopback address with a port free at the time of the
// call, for a daemon whose external URL must name its admin port before it
// starts.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestPythonGitlab runs Debian's python-gitlab against the daemon: sign-in,
// the group, project, member and token lists (with pagination through the
// Link headers), the version, and the three event lists. external.url is the
// URL the client uses, so python-gitlab must give no warning about the base
// URL (nor any other).
func TestPythonGitlab(t *testing.T) {
	py := pythonWithGitlab(t)
	admin := freeLoopbackAddr(t)
	url := "http://" + admin
	d := Start(t, map[string]string{"REGISTRYD_ADMIN_LISTEN": admin, "REGISTRYD_EXTERNAL_URL": url})
	f := d.Fix(t)

	alice, aliceToken := f.User("alice", false)
	bob, _ := f.User("bob", false)
	// root creates the groups, so root owns each top-level one.
	acme := f.Group("acme", 0, "private")
	f.Member(acme, alice, 30)
	var subs []int64
	for i := 1; i <= 11; i++ {
		subs = append(subs, f.Group(fmt.Sprintf("g%02d", i), acme, "private"))
	}
	f.Member(subs[4], alice, 40) // g05: maintainer, above what acme gives
	f.Group("open", 0, "public")
	f.Group("secret", 0, "private")
	d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", alice), rootToken,
		map[string]any{"name": "laptop", "scopes": []string{"read_api"}}).Expect(t, 201)

	// Events, oldest first: root creates app (created), bob and alice join
	// it (joined), alice creates tool (created).
	app := d.Do("POST", "/projects", rootToken, map[string]any{"name": "app", "namespace_id": subs[0]}).Expect(t, 201).ID(t)
	d.Do("POST", fmt.Sprintf("/projects/%d/members", app), rootToken, map[string]any{"user_id": bob, "access_level": 20}).Expect(t, 201)
	d.Do("POST", fmt.Sprintf("/projects/%d/members", app), rootToken, map[string]any{"user_id": alice, "access_level": 40}).Expect(t, 201)
	tool := d.Do("POST", "/projects", aliceToken, map[string]any{"name": "tool", "namespace_id": acme}).Expect(t, 201).ID(t)

	input, err := json.Marshal(map[string]any{
		"url": url, "token": aliceToken, "admin_token": rootToken, "group_id": acme, "subgroup_id": subs[4],
		"project_id": app, "user_id": alice, "other_user_id": bob,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := runPyGitlab(t, py, "testdata/pygitlab/calls.py", input, d)
	t.Logf("python-gitlab %v", got["python_gitlab"])

	// What GET /version answers over plain HTTP, for python-gitlab's
	// gl.version() to agree with.
	ver := d.Do("GET", "/version", aliceToken, nil).Expect(t, 200).Map(t)

	subgroups := []any{}
	for i := 1; i <= 11; i++ {
		subgroups = append(subgroups, fmt.Sprintf("acme/g%02d", i))
	}
	aliceGroups := append([]any{"acme"}, subgroups...)
	want := map[string]any{
		"auth":             map[string]any{"username": "alice", "id": float64(alice), "web_url": url + "/alice"},
		"version":          []any{ver["version"], ver["revision"]},
		"groups_all":       aliceGroups,
		"groups_iter":      aliceGroups,
		"groups_iter_meta": map[string]any{"total": float64(12), "total_pages": float64(3), "per_page": float64(5)},
		"groups_page2":     subgroups[4:9],
		"groups_available": append(append([]any{"acme"}, subgroups...), "open"),
		// search: "g1" is shorter than 3 characters, so a whole name or
		// path only; none is "g1".
		"groups_search":       []any{},
		"groups_top":          []any{"acme"},
		"groups_min40":        []any{"acme/g05"},
		"groups_owned":        []any{},
		"admin_groups":        append(append([]any{"acme"}, subgroups...), "open", "secret"),
		"projects_all":        []any{"acme/tool", "acme/g01/app"},
		"projects_membership": []any{"acme/tool", "acme/g01/app"},
		"projects_search":     []any{"acme/tool"},
		"group_members":       []any{[]any{"root", float64(50)}, []any{"alice", float64(30)}},
		"group_members_all":   []any{[]any{"root", float64(50)}, []any{"alice", float64(30)}},
		// root created g05 (owner), before alice joined it.
		"subgroup_members":        []any{[]any{"root", float64(50)}, []any{"alice", float64(40)}},
		"subgroup_members_all":    []any{[]any{"root", float64(50)}, []any{"alice", float64(40)}},
		"subgroup_member_all_one": []any{[]any{"alice", float64(40)}},
		"project_members":         []any{[]any{"bob", float64(20)}, []any{"alice", float64(40)}},
		"project_members_all":     []any{[]any{"root", float64(50)}, []any{"bob", float64(20)}, []any{"alice", float64(40)}},
		"tokens":                  []any{[]any{"t", true, false}, []any{"laptop", true, false}},
		"admin_tokens_of_user":    []any{"t", "laptop"},
		// Events newest first: alice's own, bob's (alice can see app),
		// and app's.
		"events":                []any{[]any{"created", float64(tool), "alice"}, []any{"joined", float64(app), "alice"}},
		"user_events":           []any{[]any{"joined", float64(app), "bob"}},
		"project_events":        []any{[]any{"joined", float64(app), "alice"}, []any{"joined", float64(app), "bob"}, []any{"created", float64(app), "root"}},
		"project_events_joined": []any{[]any{"joined", float64(app), "alice"}, []any{"joined", float64(app), "bob"}},
		"bad_token":             "GitlabAuthenticationError 401",
		"warnings":              []any{},
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: missing from the script's output", k)
			continue
		}
		if g == nil {
			g = []any{}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\n got  %v\n want %v", k, g, w)
		}
	}
	if ver["version"] != "dev" || !regexp.MustCompile(`^([0-9a-f]{11}|unknown)$`).MatchString(fmt.Sprint(ver["revision"])) ||
		(gitRevision != "" && ver["revision"] != gitRevision) {
		t.Errorf("GET /version: %v (git: %q)", ver, gitRevision)
	}

	pyGitlabDeletes(t, py, d, url, aliceToken, subs[4])
	noServerErrors(t, d)
}

// pyGitlabDeletes has python-gitlab delete a project, a group (with a
// subgroup, a project, a registry and an upstream) and two users, one the
// only owner of a group, and checks the effects through the API: GitLab's
// statuses (202 for groups and projects, 204 for users, 403 and 404 for
// who may not, 409 for a sole owner without hard_delete) and nothing left
// of what was deleted. alice (aliceToken) is a maintainer of maintained.
func pyGitlabDeletes(t *testing.T, py string, d *Daemon, url, aliceToken string, maintained int64) {
	t.Helper()
	f := d.Fix(t)
	scratch := d.Do("POST", "/projects", rootToken, map[string]any{"name": "scratch", "namespace_id": maintained}).Expect(t, 201).ID(t)
	doomed := f.Group("doomed", 0, "private")
	doomedSub := f.Group("sub", doomed, "private")
	doomedProject := d.Do("POST", "/projects", rootToken, map[string]any{"name": "app", "namespace_id": doomedSub}).Expect(t, 201).ID(t)
	registry := f.Registry(doomed, "main")
	upstream := f.Upstream(registry, "https://repo.example/maven2", nil)
	carol, carolToken := f.User("carol", false)
	f.Member(doomed, carol, 30)
	dave, daveToken := f.User("dave", false)
	daveGroup := d.Do("POST", "/groups", daveToken, map[string]any{"name": "daves", "path": "daves"}).Expect(t, 201).ID(t)

	input, err := json.Marshal(map[string]any{
		"url": url, "token": aliceToken, "admin_token": rootToken,
		"scratch_project_id": scratch, "doomed_group_id": doomed, "doomed_subgroup_id": doomedSub,
		"doomed_project_id": doomedProject, "carol_id": carol, "carol_token": carolToken,
		"dave_id": dave, "dave_group_id": daveGroup,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := runPyGitlab(t, py, "testdata/pygitlab/deletes.py", input, d)
	want := map[string]any{
		"project_delete_by_maintainer": "GitlabDeleteError 403",
		"project_delete":               "ok",
		"project_after":                "GitlabGetError 404",
		"group_delete_by_outsider":     "GitlabDeleteError 404",
		"group_delete":                 "ok",
		"group_after":                  "GitlabGetError 404",
		"subgroup_after":               "GitlabGetError 404",
		"group_project_after":          "GitlabGetError 404",
		"group_paths_after":            []any{},
		"user_delete_by_user":          "GitlabDeleteError 403",
		"user_delete":                  "ok",
		"user_after":                   "GitlabGetError 404",
		"user_token_after":             "GitlabAuthenticationError 401",
		"users_named_carol":            []any{},
		"sole_owner_delete":            "GitlabDeleteError 409",
		"sole_owner_group_before":      "ok",
		"sole_owner_hard_delete":       "ok",
		"sole_owner_after":             "GitlabGetError 404",
		"sole_owner_group_after":       "GitlabGetError 404",
		"warnings":                     []any{},
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("deletes: %s: missing from the script's output", k)
			continue
		}
		if g == nil {
			g = []any{}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("deletes: %s:\n got  %v\n want %v", k, g, w)
		}
	}

	// What python-gitlab does not reach: the registry and upstream of the
	// deleted group, the statuses GitLab gives, and that the paths are free.
	d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d", registry), rootToken, nil).Expect(t, 404)
	d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d", upstream), rootToken, nil).Expect(t, 404)
	d.Do("GET", "/groups/doomed%2Fsub", rootToken, nil).Expect(t, 404)
	again := f.Group("doomed", 0, "private")
	d.Do("DELETE", fmt.Sprintf("/groups/%d", again), rootToken, nil).Expect(t, 202)
	gone, _ := f.User("erin", false)
	d.Do("DELETE", fmt.Sprintf("/users/%d", gone), rootToken, nil).Expect(t, 204)
	if m := d.Do("DELETE", fmt.Sprintf("/projects/%d", doomedProject), rootToken, nil).Expect(t, 404).Map(t); m["message"] != "404 Project Not Found" {
		t.Errorf("deleting a deleted project: %v", m)
	}
}

// runPyGitlab runs a script of testdata/pygitlab with input (PYGITLAB_INPUT)
// and returns the JSON object it printed.
func runPyGitlab(t *testing.T, py, script string, input []byte, d *Daemon) map[string]any {
	t.Helper()
	cmd := exec.Command(py, script)
	cmd.Env = append(os.Environ(), "PYGITLAB_INPUT="+string(input), "PYTHONDONTWRITEBYTECODE=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done := make(chan struct{})
	timer := time.AfterFunc(2*time.Minute, func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
		}
	})
	raw, err := cmd.Output()
	close(done)
	timer.Stop()
	if err != nil {
		t.Fatalf("python-gitlab script %s: %v\n%s\ndaemon log:\n%s", script, err, stderr.String(), d.Logs())
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s output is not JSON (%v): %s\n%s", script, err, raw, stderr.String())
	}
	return got
}
