package soak

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// api is the admin API as root.
type api struct {
	base, token string
	client      *http.Client
	timeout     time.Duration
}

// call sends one request and decodes a 2xx JSON answer into out. It
// returns the status (0 when the request failed) and an error for a
// failure or an answer other than want.
func (a *api) call(method, path string, body, out any, want int) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/api/v4"+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("PRIVATE-TOKEN", a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if res.StatusCode != want {
		return res.StatusCode, fmt.Errorf("%s %s: %d, want %d: %s", method, path, res.StatusCode, want, truncate(string(raw)))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, nil
}

// world is what setup created.
type world struct {
	group, registry   int64
	central, vendor   int64 // upstream ids
	centralLink       int64 // central's registry_upstream id (its position)
	vendorRule        int64 // central's deny rule on org.soak.vendor*, PATCHed by the churn
	churnUser         int64 // user whose tokens the churn creates and revokes
	basicAuth         string
	centralUp, vendUp *fakeUpstream
}

type idOnly struct {
	ID    int64  `json:"id"`
	Token string `json:"token"`
	Link  struct {
		ID int64 `json:"id"`
	} `json:"registry_upstream"`
}

// setup creates the group, the merging registry over both upstreams, their
// rules, the build user (read_virtual_registry, Basic auth as a build
// machine sends it) and the user whose tokens the churn creates and
// revokes.
func setup(a *api, w *world, secret func(what, value string)) error {
	var g, r, c, v, builder, tok, churn, rule idOnly
	if _, err := a.call("POST", "/groups", map[string]any{"name": "soak", "path": "soak"}, &g, 201); err != nil {
		return err
	}
	regs := fmt.Sprintf("/groups/%d/-/virtual_registries/packages/maven/registries", g.ID)
	if _, err := a.call("POST", regs, map[string]any{"name": "soak", "merge_metadata": true}, &r, 201); err != nil {
		return err
	}
	ups := fmt.Sprintf("/virtual_registries/packages/maven/registries/%d/upstreams", r.ID)
	if _, err := a.call("POST", ups, map[string]any{"url": w.centralUp.URL, "name": central}, &c, 201); err != nil {
		return err
	}
	if _, err := a.call("POST", ups, map[string]any{"url": w.vendUp.URL, "name": vendor}, &v, 201); err != nil {
		return err
	}
	rules := func(up int64) string { return fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d/rules", up) }
	for _, rl := range []struct {
		up       int64
		typ, pat string
		out      *idOnly
	}{
		{c.ID, "deny", "org.soak.vendor*", &rule},
		{c.ID, "deny", "org.soak.internal*", nil},
		{v.ID, "allow", "org.soak.*", nil},
		{v.ID, "deny", "org.soak.internal*", nil},
	} {
		var out any
		if rl.out != nil {
			out = rl.out
		}
		if _, err := a.call("POST", rules(rl.up), map[string]any{"rule_type": rl.typ, "target_coordinate": "group_id",
			"pattern": rl.pat}, out, 201); err != nil {
			return err
		}
	}
	if _, err := a.call("POST", "/users", map[string]any{"username": "soak-builder", "name": "soak builder",
		"email": "soak-builder@example.com"}, &builder, 201); err != nil {
		return err
	}
	if _, err := a.call("POST", fmt.Sprintf("/groups/%d/members", g.ID),
		map[string]any{"user_id": builder.ID, "access_level": 10}, nil, 201); err != nil {
		return err
	}
	if _, err := a.call("POST", fmt.Sprintf("/users/%d/personal_access_tokens", builder.ID),
		map[string]any{"name": "soak", "scopes": []string{"read_virtual_registry"}}, &tok, 201); err != nil {
		return err
	}
	secret("soak build token", tok.Token)
	if _, err := a.call("POST", "/users", map[string]any{"username": "soak-churn", "name": "soak churn",
		"email": "soak-churn@example.com"}, &churn, 201); err != nil {
		return err
	}
	*w = world{group: g.ID, registry: r.ID, central: c.ID, vendor: v.ID, centralLink: c.Link.ID,
		vendorRule: rule.ID, churnUser: churn.ID, centralUp: w.centralUp, vendUp: w.vendUp,
		basicAuth: "Basic " + base64.StdEncoding.EncodeToString([]byte("soak-builder:"+tok.Token))}
	return nil
}

// churn is the admin writes sent alongside the load, a few a second, each
// of a kind an operator does during the day and each touching what the
// download path reads: an upstream's description (the edit that made
// merged metadata answer another artifact's versions in issue 20), the
// registry, a token created and revoked, central's deny rule (rewritten
// with a pattern that matches the same groups), and central's position
// (swapped with vendor's: neither changes a right answer).
type churn struct {
	a        *api
	w        *world
	secret   func(what, value string)
	n        int
	token    int64 // the churn token to revoke next, 0 when none
	position int
}

// next sends the next write and returns its status (0 when it failed
// before an answer) and an error when the answer was not the one due.
func (c *churn) next() (int, error) {
	c.n++
	tag := fmt.Sprintf("soak churn %d", c.n)
	switch c.n % 7 {
	case 0:
		return c.a.call("PATCH", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d", c.w.central),
			map[string]any{"description": tag}, nil, 200)
	case 1:
		return c.a.call("PATCH", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d", c.w.registry),
			map[string]any{"name": "soak", "description": tag}, nil, 200)
	case 2:
		var tok idOnly
		status, err := c.a.call("POST", fmt.Sprintf("/users/%d/personal_access_tokens", c.w.churnUser),
			map[string]any{"name": tag, "scopes": []string{"read_api"}}, &tok, 201)
		if err == nil {
			c.secret("soak churn token", tok.Token)
			c.token = tok.ID
		}
		return status, err
	case 3:
		if c.token == 0 {
			return c.a.call("PATCH", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d", c.w.registry),
				map[string]any{"name": "soak", "description": tag}, nil, 200)
		}
		id := c.token
		c.token = 0
		return c.a.call("DELETE", fmt.Sprintf("/personal_access_tokens/%d", id), nil, nil, 204)
	case 4:
		return c.a.call("PATCH", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d", c.w.vendor),
			map[string]any{"description": tag}, nil, 200)
	case 5:
		pattern := "org.soak.vendor*"
		if c.n%2 == 1 {
			pattern = "*org.soak.vendor"
		}
		return c.a.call("PATCH", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d/rules/%d", c.w.central, c.w.vendorRule),
			map[string]any{"pattern": pattern}, nil, 200)
	default:
		c.position = 3 - max(c.position, 1) // 1, 2, 1, …
		return c.a.call("PATCH", fmt.Sprintf("/virtual_registries/packages/maven/registry_upstreams/%d", c.w.centralLink),
			map[string]any{"position": c.position}, nil, 200)
	}
}

// purge deletes the registry's cache entries (both upstreams' entries).
func purge(a *api, w *world) (int, error) {
	return a.call("DELETE", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d/cache", w.registry), nil, nil, 204)
}
