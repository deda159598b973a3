package upstream

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// DefaultTestPath is what the connection test asks for when the upstream has
// no cached entry to try (GitLab's dummy path).
const DefaultTestPath = "com/company/app/maven-metadata.xml"

// TestResult is the body of the upstream test endpoints.
type TestResult struct {
	Success bool   `json:"success"`
	Result  string `json:"result,omitempty"`
}

// Test is the connection test: CheckURL, then a HEAD of Join(ep.URL, path)
// with Basic auth when ep.Username is set, following redirects, all within
// CheckTimeout. An empty path means DefaultTestPath; a leading "/" (as in
// cache entry paths) is ignored.
//
// 2xx and 404 succeed: the test checks reachability and credentials, not that
// an artifact exists. Any other status gives "Error: <code> - <reason
// phrase>"; a network failure gives "Error: <short reason>" such as
// "Connection timeout", "Connection refused", "Host cannot be resolved or
// invalid" (HostUnresolvable), "Too many redirects" or a CheckURL reason
// ("is blocked: ..."). Results are fixed
// phrases: they never contain the URL or the credentials.
func (c *Client) Test(ctx context.Context, ep Endpoint, path string) TestResult {
	ctx, cancel := context.WithTimeout(ctx, c.checkTimeout)
	defer cancel()
	if err := c.CheckURL(ctx, ep.URL); err != nil {
		return testFailure(err)
	}
	if path = strings.TrimLeft(path, "/"); path == "" {
		path = DefaultTestPath
	}
	if _, err := c.head(ctx, ep, path); err != nil {
		return testFailure(err)
	}
	return TestResult{Success: true}
}

func testFailure(err error) TestResult {
	var (
		se *StatusError
		ne *NetError
		ue *URLError
	)
	switch {
	case errors.As(err, &se):
		if se.Code == http.StatusNotFound {
			return TestResult{Success: true}
		}
		return TestResult{Result: "Error: " + strconv.Itoa(se.Code) + " - " + se.Status}
	case errors.As(err, &ne):
		return TestResult{Result: "Error: " + ne.Reason}
	case errors.As(err, &ue):
		return TestResult{Result: "Error: " + ue.Reason}
	}
	return TestResult{Result: "Error: Connection failed"}
}
