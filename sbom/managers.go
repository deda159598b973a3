package sbom

import (
	"path"
	"regexp"
	"strings"

	"github.com/package-url/packageurl-go"
)

// purlType is the type of a package URL (pkg:TYPE/...), lower-cased, or ""
// when purl is not one by the purl specification (no name, a bad
// percent-encoding or qualifier, a type's own rule broken): a malformed purl
// says nothing reliable about its package, and the file name decides alone,
// as without a purl. GitLab reads purls with a parser of the specification
// too (Sbom::PackageUrl).
func purlType(purl string) string {
	t, _, _ := purlParts(purl)
	return t
}

// purlParts is the type, namespace and name of a package URL, all "" when
// purl is not one (see purlType).
func purlParts(purl string) (ptype, namespace, name string) {
	if purl == "" {
		return "", "", ""
	}
	p, err := packageurl.FromString(purl)
	if err != nil {
		return "", "", ""
	}
	return p.Type, p.Namespace, p.Name
}

// derivePackageManager is registryd's fallback when no property names the
// package manager: the purl type, refined by the dependency file's name
// (maven + build.gradle is gradle, npm + yarn.lock is yarn, ...). Without a
// purl the file name alone decides. Unknown combinations have none.
func derivePackageManager(ptype, file string) string {
	base := strings.ToLower(path.Base(file))
	if file == "" {
		base = ""
	}
	switch ptype {
	case "maven":
		switch {
		case base == "build.gradle", base == "build.gradle.kts", base == "gradle.lockfile", base == "settings.gradle",
			base == "settings.gradle.kts":
			return "gradle"
		case base == "build.sbt":
			return "sbt"
		}
		return "maven"
	case "npm":
		switch base {
		case "yarn.lock":
			return "yarn"
		case "pnpm-lock.yaml":
			return "pnpm"
		}
		return "npm"
	case "pypi":
		switch {
		case base == "pipfile", base == "pipfile.lock":
			return "pipenv"
		case base == "poetry.lock":
			return "poetry"
		case base == "setup.py", base == "setup.cfg":
			return "setuptools"
		}
		return "pip"
	case "gem":
		return "bundler"
	case "golang":
		return "go"
	case "nuget", "composer", "conan", "cargo", "pub", "conda", "apk":
		return ptype
	case "":
		return packageManagerOfFile(base)
	}
	return ""
}

var requirementsRE = regexp.MustCompile(`^requirements.*\.(txt|pip)$`)

func packageManagerOfFile(base string) string {
	switch base {
	case "go.mod", "go.sum":
		return "go"
	case "package-lock.json", "npm-shrinkwrap.json", "package.json":
		return "npm"
	case "yarn.lock":
		return "yarn"
	case "pnpm-lock.yaml":
		return "pnpm"
	case "pom.xml":
		return "maven"
	case "build.gradle", "build.gradle.kts", "gradle.lockfile":
		return "gradle"
	case "build.sbt":
		return "sbt"
	case "gemfile", "gemfile.lock", "gems.locked":
		return "bundler"
	case "composer.json", "composer.lock":
		return "composer"
	case "pipfile", "pipfile.lock":
		return "pipenv"
	case "poetry.lock":
		return "poetry"
	case "setup.py", "setup.cfg":
		return "setuptools"
	case "packages.lock.json", "packages.config":
		return "nuget"
	case "conan.lock", "conanfile.txt", "conanfile.py":
		return "conan"
	case "cargo.lock":
		return "cargo"
	case "pubspec.lock":
		return "pub"
	case "environment.yml", "environment.yaml":
		return "conda"
	}
	if requirementsRE.MatchString(base) {
		return "pip"
	}
	return ""
}
