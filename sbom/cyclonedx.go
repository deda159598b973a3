package sbom

// CycloneDX properties registryd reads. The gitlab: names are GitLab's own
// (lib/gitlab/ci/parsers/sbom/cyclonedx_properties.rb); the others are what
// common scanners write.
const (
	propPackageManager = "gitlab:dependency_scanning:package_manager:name"
	propInputFile      = "gitlab:dependency_scanning:input_file:path"
	propSyftLocation   = "syft:location:0:path" // syft
	propCdxgenSrcFile  = "SrcFile"              // cdxgen
)

// maxComponentDepth bounds the nesting of components, so a hostile body
// cannot grow the reader's stack.
const maxComponentDepth = 256

// supportedSpecVersions are the CycloneDX versions whose JSON this reader
// knows; older ones name fields differently. What 1.7 adds (citations,
// patents, distribution constraints, more cryptography) is not part of a
// dependency list and is skipped like any unknown key.
var supportedSpecVersions = []string{"1.4", "1.5", "1.6", "1.7"}

// listedComponentTypes are the component types that are dependencies. Files,
// operating systems, devices, firmware, data and models are not.
var listedComponentTypes = []string{"", "library", "framework", "application", "container"}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxLicense struct {
	License *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"license"`
	Expression string `json:"expression"`
}

type cdxEvidence struct {
	Occurrences []struct {
		Location string `json:"location"`
	} `json:"occurrences"`
}

type cdxVulnerability struct {
	BOMRef      string `json:"bom-ref"`
	ID          string `json:"id"`
	Description string `json:"description"`
	Detail      string `json:"detail"`
	Ratings     []struct {
		Severity string `json:"severity"`
	} `json:"ratings"`
	Affects []struct {
		Ref string `json:"ref"`
	} `json:"affects"`
}
