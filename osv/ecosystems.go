package osv

import (
	"regexp"
	"strings"

	"registryd/maven"
)

// OSV ecosystems registryd matches (the "ecosystem" of an OSV record's
// affected[].package, without the ":suffix" some databases add).
const (
	Maven     = "Maven"
	NPM       = "npm"
	PyPI      = "PyPI"
	Go        = "Go"
	RubyGems  = "RubyGems"
	Packagist = "Packagist"
	NuGet     = "NuGet"
	CratesIO  = "crates.io"
	Pub       = "Pub"
)

// Ecosystems are the ecosystems whose advisories registryd keeps. Records
// of other ecosystems (Debian, Alpine, ...) are skipped at import.
var Ecosystems = []string{Maven, NPM, PyPI, Go, RubyGems, Packagist, NuGet, CratesIO, Pub}

// purlTypes maps package URL types to ecosystems (osv.dev's own table).
var purlTypes = map[string]string{
	"maven": Maven, "npm": NPM, "pypi": PyPI, "golang": Go, "gem": RubyGems,
	"composer": Packagist, "nuget": NuGet, "cargo": CratesIO, "pub": Pub,
}

// managers maps GitLab's package managers to ecosystems, for dependencies
// without a package URL.
var managers = map[string]string{
	"maven": Maven, "gradle": Maven, "sbt": Maven,
	"npm": NPM, "yarn": NPM, "pnpm": NPM,
	"pip": PyPI, "pipenv": PyPI, "poetry": PyPI, "setuptools": PyPI,
	"go": Go, "bundler": RubyGems, "composer": Packagist, "nuget": NuGet, "cargo": CratesIO, "pub": Pub,
}

// ecosystemOf returns the ecosystem of an OSV ecosystem name ("Maven",
// "npm", also "Maven:central"), or "" when registryd does not keep it.
func ecosystemOf(name string) string {
	base, _, _ := strings.Cut(name, ":")
	for _, e := range Ecosystems {
		if base == e {
			return e
		}
	}
	return ""
}

var pypiSeparators = regexp.MustCompile(`[-_.]+`)

// NormalizeName is the form in which registryd compares package names of
// an ecosystem: PyPI's PEP 503 name (lower case, runs of "-", "_", "."
// as one "-"); NuGet, Packagist and crates.io names lower-cased (their
// registries ignore case); Maven's group:artifact written group/artifact,
// as the dependency list shows it. Other names are exact.
func NormalizeName(ecosystem, name string) string {
	switch ecosystem {
	case PyPI:
		return pypiSeparators.ReplaceAllString(strings.ToLower(name), "-")
	case NuGet, Packagist, CratesIO:
		return strings.ToLower(name)
	case Maven:
		return strings.Replace(name, ":", "/", 1)
	}
	return name
}

// EcosystemOfManager is the ecosystem of a package manager, or "".
func EcosystemOfManager(manager string) string { return managers[manager] }

// EcosystemOfPurlType is the ecosystem of a package URL type, or "".
func EcosystemOfPurlType(ptype string) string { return purlTypes[ptype] }

// PackageOfPurl is the ecosystem and normalised name of a package URL's
// parts (type, namespace, name), or "" when the type has no ecosystem.
func PackageOfPurl(ptype, namespace, name string) (ecosystem, pkg string) {
	ecosystem = purlTypes[ptype]
	if ecosystem == "" || name == "" {
		return "", ""
	}
	if namespace != "" {
		name = namespace + "/" + name
	}
	return ecosystem, NormalizeName(ecosystem, name)
}

// PackageOfManager is the ecosystem and normalised name of a dependency
// listed without a package URL, from its package manager and its listed
// name (group/name for Maven and npm scopes).
func PackageOfManager(manager, name string) (ecosystem, pkg string) {
	ecosystem = managers[manager]
	if ecosystem == "" || name == "" {
		return "", ""
	}
	return ecosystem, NormalizeName(ecosystem, name)
}

// PackageOf is store.AdvisoryMatcher's: PackageOfManager.
func (Matcher) PackageOf(manager, name string) (ecosystem, pkg string) {
	return PackageOfManager(manager, name)
}

// order is an ecosystem's version order: parse reads a version (ok false
// when it is not one of the ecosystem), cmp compares two parsed ones.
type order struct {
	parse func(string) (any, bool)
	cmp   func(a, b any) int
}

func orderOf[V any](parse func(string) (V, bool), cmp func(a, b V) int) *order {
	return &order{
		parse: func(s string) (any, bool) {
			v, ok := parse(s)
			return v, ok
		},
		cmp: func(a, b any) int { return cmp(a.(V), b.(V)) },
	}
}

var (
	semverOrder   = orderOf(parseSemver, compareSemver)
	goOrder       = orderOf(func(s string) (semver, bool) { return parseSemver(goVersion(s)) }, compareSemver)
	mavenOrder    = orderOf(func(s string) (string, bool) { return s, strings.TrimSpace(s) != "" }, maven.CompareVersions)
	pep440Order   = orderOf(parsePEP440, comparePEP440)
	gemOrder      = orderOf(parseGem, compareGem)
	composerOrder = orderOf(normalizeComposer, phpVersionCompare)
	nugetOrder    = orderOf(parseNuGet, compareNuGet)
)

// ecosystemOrders are the orders of OSV ranges of type ECOSYSTEM. An
// ecosystem without one here is matched by its enumerated versions only.
var ecosystemOrders = map[string]*order{
	Maven: mavenOrder, NPM: semverOrder, PyPI: pep440Order, Go: goOrder, RubyGems: gemOrder,
	Packagist: composerOrder, NuGet: nugetOrder, CratesIO: semverOrder, Pub: semverOrder,
}

// CompareVersions orders two versions of an ecosystem: <0, 0, >0, and ok
// false when the ecosystem has no order registryd knows or either is not
// one of its versions.
func CompareVersions(ecosystem, a, b string) (c int, ok bool) {
	o := ecosystemOrders[ecosystem]
	if o == nil {
		return 0, false
	}
	x, okA := o.parse(a)
	y, okB := o.parse(b)
	if !okA || !okB {
		return 0, false
	}
	return o.cmp(x, y), true
}
