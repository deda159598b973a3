package sbom

import (
	"encoding/json"
	"path"
	"strings"
)

// cleanPath makes a tool's file location a repository-relative path.
func cleanPath(p string) string {
	p = strings.TrimSpace(p)
	p = strings.TrimPrefix(p, "file://")
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	return strings.TrimLeft(p, "/")
}

// srcRoot is the directory cdxgen scanned, as far as its SrcFile properties
// tell: they are absolute paths on the scanning machine (or relative to its
// temp dir), and the longest directory holding all of them is taken as the
// repository root. One lockfile gives its own directory. It is built one
// SrcFile at a time, as components are read.
type srcRoot struct {
	dirs []string
	seen bool
	last string
}

func (r *srcRoot) add(p string) {
	if p == "" || (r.seen && p == r.last) {
		return
	}
	r.last = p
	dir := strings.Split(path.Dir(path.Clean(strings.ReplaceAll(p, `\`, "/"))), "/")
	if !r.seen {
		r.dirs, r.seen = dir, true
		return
	}
	n := 0
	for n < len(r.dirs) && n < len(dir) && r.dirs[n] == dir[n] {
		n++
	}
	r.dirs = r.dirs[:n]
}

func (r *srcRoot) String() string { return strings.Join(r.dirs, "/") }

// relativeTo makes p relative to root (see srcRoot).
func relativeTo(root, p string) string {
	if p == "" {
		return ""
	}
	p = path.Clean(strings.ReplaceAll(p, `\`, "/"))
	if root != "" && root != "." {
		p = strings.TrimPrefix(p, strings.TrimSuffix(root, "/")+"/")
	}
	return cleanPath(p)
}

func occurrence(ev *cdxEvidence) string {
	if ev == nil {
		return ""
	}
	for _, o := range ev.Occurrences {
		if p := cleanPath(o.Location); p != "" {
			return p
		}
	}
	return ""
}

// toolDefaultFile is the input file of generators that read exactly one
// kind of file and do not say which: cyclonedx-npm reads package-lock.json,
// cyclonedx-gomod go.mod. metadata.tools is an array of tools before
// CycloneDX 1.5 and an object with components and services since.
func toolDefaultFile(raw json.RawMessage) string {
	type tool struct {
		Name string `json:"name"`
	}
	var names []string
	var list []tool
	var obj struct {
		Components []tool `json:"components"`
		Services   []tool `json:"services"`
	}
	if json.Unmarshal(raw, &list) == nil {
		for _, t := range list {
			names = append(names, t.Name)
		}
	} else if json.Unmarshal(raw, &obj) == nil {
		for _, t := range append(obj.Components, obj.Services...) {
			names = append(names, t.Name)
		}
	}
	for _, n := range names {
		switch n {
		case "cyclonedx-npm":
			return "package-lock.json"
		case "cyclonedx-gomod":
			return "go.mod"
		}
	}
	return ""
}
