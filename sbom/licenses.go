package sbom

import (
	"regexp"
	"slices"
	"strings"

	"registryd/store"
)

// licenses reads a component's licenses: named ones as given, SPDX ids with
// their spdx.org page, and the ids inside an expression one by one.
func licenses(in []cdxLicense) []store.License {
	var out []store.License
	add := func(l store.License) {
		if l.Name != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	for _, l := range in {
		switch {
		case l.License != nil && l.License.ID != "":
			add(spdxLicense(l.License.ID, l.License.Name, l.License.URL))
		case l.License != nil:
			add(store.License{Name: l.License.Name, URL: l.License.URL})
		case l.Expression != "":
			for _, id := range expressionIDs(l.Expression) {
				add(spdxLicense(id, "", ""))
			}
		}
	}
	return out
}

var spdxIDRE = regexp.MustCompile(`^[A-Za-z0-9.+-]+$`)

func spdxLicense(id, name, link string) store.License {
	l := store.License{Name: firstOf(name, id), URL: link}
	if strings.HasPrefix(id, "LicenseRef-") || strings.HasPrefix(id, "DocumentRef-") || !spdxIDRE.MatchString(id) {
		return l
	}
	l.SPDX = id
	if l.URL == "" {
		l.URL = "https://spdx.org/licenses/" + strings.TrimSuffix(id, "+") + ".html"
	}
	return l
}

// expressionIDs lists the license ids of an SPDX expression, leaving out the
// operators and the exceptions that follow WITH.
func expressionIDs(expr string) []string {
	fields := strings.Fields(strings.NewReplacer("(", " ", ")", " ").Replace(expr))
	var ids []string
	for i := 0; i < len(fields); i++ {
		switch strings.ToUpper(fields[i]) {
		case "AND", "OR":
		case "WITH":
			i++ // the exception
		default:
			ids = append(ids, fields[i])
		}
	}
	return ids
}
