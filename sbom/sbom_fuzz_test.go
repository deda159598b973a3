package sbom

import (
	"errors"
	"strings"
	"testing"

	"registryd/store"
)

// wantRefusal fails unless err is one of the reader's refusals (a 400 on
// the listener); anything else would be a 500.
func wantRefusal(t *testing.T, err error) {
	t.Helper()
	var se *Error
	var ve *store.ValidationError
	if !errors.As(err, &se) && !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T) is not a refusal", err, err)
	}
}

// FuzzParseSBOM: whatever the body, the reader answers a result whose
// dependencies the store accepts, or a refusal (a 400 on the listener); it
// never panics.
func FuzzParseSBOM(f *testing.F) {
	// Small seeds: the fuzzer minimises every new input, and the scanners'
	// files (TestParseSBOMFixtures) would make that crawl.
	for _, s := range []string{
		`{"bomFormat":"CycloneDX","specVersion":"1.6","metadata":{"tools":{"components":[{"name":"cdxgen"}]},"properties":[{"name":"gitlab:dependency_scanning:input_file:path","value":"a/go.mod"}]},` +
			`"components":[{"type":"library","group":"@s","name":"n","version":"1","purl":"pkg:npm/%40s/n@1","licenses":[{"license":{"id":"MIT"}}],` +
			`"properties":[{"name":"SrcFile","value":"/r/yarn.lock"}],"evidence":{"occurrences":[{"location":"x"}]}}]}`,
		sbom(`,"components":[{"name":"a","components":[{"name":"b","licenses":[{"expression":"(MIT OR X) WITH"}]}]}]`),
		sbom(`,"components":[{"bom-ref":"r","name":"a"}],"vulnerabilities":[{"id":"C","affects":[{"ref":"urn:cdx:x/1#r"}],"ratings":[{"severity":"none"}]}]`),
		`{"bomFormat":"CycloneDX","specVersion":"1.5","metadata":{"tools":[{"name":"cyclonedx-npm"}]},"components":[{"name":"x","purl":"pkg:"}]}`,
		`{"components":[[]],"bomFormat":"CycloneDX"}`, `{"a":{"b":[1,{"c":null}]}}`, `[`, `{"bomFormat":`, `nul`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		res, err := Read(strings.NewReader(body), Options{FilePath: "go.mod"})
		if err != nil {
			wantRefusal(t, err)
			return
		}
		for _, d := range res.Dependencies {
			if d.Name == "" {
				t.Fatalf("a dependency without a name: %+v", d)
			}
		}
	})
}
