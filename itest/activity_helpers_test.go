package itest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// gitlabClient is the official GitLab Go client pointed at the daemon's
// admin API, without retries so a failure shows at once.
func gitlabClient(t testing.TB, d *Daemon, token string) *gitlab.Client {
	t.Helper()
	c, err := gitlab.NewClient(token, gitlab.WithBaseURL(d.Admin+"/api/v4"), gitlab.WithoutRetries())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createProject creates a project in group through the API as token's user.
func createProject(t testing.TB, d *Daemon, token string, group int64, path, visibility string) int64 {
	t.Helper()
	return d.Do("POST", "/projects", token, map[string]any{
		"name": path, "path": path, "namespace_id": group, "visibility": visibility,
	}).Expect(t, 201).ID(t)
}

// addProjectMember adds user to project at level, as root.
func addProjectMember(t testing.TB, d *Daemon, project, user int64, level int) {
	t.Helper()
	d.Do("POST", fmt.Sprintf("/projects/%d/members", project), rootToken,
		map[string]any{"user_id": user, "access_level": level}).Expect(t, 201)
}

// sbomFile reads a committed SBOM made by a real scanner.
func sbomFile(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "sbom", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// putSBOM uploads an SBOM to project as token's user.
func putSBOM(t testing.TB, d *Daemon, token string, project int64, body []byte) *Resp {
	t.Helper()
	return d.Do("PUT", fmt.Sprintf("/projects/%d/dependencies", project), token, body,
		"Content-Type", "application/vnd.cyclonedx+json")
}

// statusOf is the HTTP status of a client error, or 0.
func statusOf(err error) int {
	var er *gitlab.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return er.Response.StatusCode
	}
	if errors.Is(err, gitlab.ErrNotFound) {
		return http.StatusNotFound
	}
	return 0
}
