package sbomtest

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"

	"github.com/package-url/packageurl-go"
)

// WriteLargeSPDX writes a deterministic SPDX 2.3 JSON document of about
// size bytes, shaped as syft writes one for a big directory scan: per
// package a purl, licenses, a checksum, sourceInfo, supplier and
// copyright; the lockfiles as files; a DESCRIBES relationship, a CONTAINS
// from the root to every package and an OTHER "evident-by" from every
// package to its lockfile. It returns how many packages it lists.
func WriteLargeSPDX(w io.Writer, size int64) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &countingWriter{w: bw}
	rng := rand.New(rand.NewPCG(3, 4))
	type eco struct{ purl, file, fileID string }
	ecos := []eco{
		{"maven", "/builds/acme/monorepo/services/api/pom.xml", "SPDXRef-File-pom"},
		{"npm", "/builds/acme/monorepo/web/package-lock.json", "SPDXRef-File-package-lock"},
		{"pypi", "/builds/acme/monorepo/ml/requirements.txt", "SPDXRef-File-requirements"},
		{"golang", "/builds/acme/monorepo/tools/go.mod", "SPDXRef-File-go-mod"},
	}
	licenses := []string{"Apache-2.0", "MIT", "(MIT OR Apache-2.0) AND BSD-3-Clause", "NOASSERTION", "EPL-2.0"}
	cw.str(`{"spdxVersion":"SPDX-2.3","dataLicense":"CC0-1.0","SPDXID":"SPDXRef-DOCUMENT","name":"/builds/acme/monorepo",` +
		`"documentNamespace":"https://anchore.com/syft/dir/builds/acme/monorepo-3e671687-395b-41f5-a30f-a58921a69b79",` +
		`"creationInfo":{"licenseListVersion":"3.25","creators":["Organization: Anchore, Inc","Tool: syft-1.57.1"],"created":"2026-11-21T10:04:05Z"},` +
		`"packages":[{"name":"/builds/acme/monorepo","SPDXID":"SPDXRef-DocumentRoot-Directory-monorepo","downloadLocation":"NOASSERTION",` +
		`"filesAnalyzed":false,"primaryPackagePurpose":"FILE","licenseConcluded":"NOASSERTION","licenseDeclared":"NOASSERTION","copyrightText":"NOASSERTION"}`)
	var ids []string
	for i := 0; cw.n < size*60/100; i++ {
		e := ecos[i%len(ecos)]
		group := "org.example.g" + strconv.Itoa(i%97)
		name := "component-" + strconv.Itoa(i)
		version := fmt.Sprintf("%d.%d.%d", rng.IntN(10), rng.IntN(30), rng.IntN(100))
		purl := packageurl.NewPackageURL(e.purl, group, name, version, nil, "").ToString()
		id := "SPDXRef-Package-" + e.purl + "-" + name + "-" + strconv.FormatUint(rng.Uint64(), 16)
		ids = append(ids, id)
		lic := licenses[i%len(licenses)]
		cw.str(`,{"name":"` + name + `","SPDXID":"` + id + `","versionInfo":"` + version + `","supplier":"NOASSERTION",` +
			`"downloadLocation":"NOASSERTION","filesAnalyzed":false,"checksums":[{"algorithm":"SHA1","checksumValue":"` +
			fmt.Sprintf("%040x", rng.Uint64()) + `"}],"sourceInfo":"acquired package info from the following paths: ` + e.file +
			`","licenseConcluded":"` + lic + `","licenseDeclared":"` + lic + `","copyrightText":"NOASSERTION",` +
			`"externalRefs":[{"referenceCategory":"SECURITY","referenceType":"cpe23Type","referenceLocator":"cpe:2.3:a:` + name + `:` + name + `:` + version +
			`:*:*:*:*:*:*:*"},{"referenceCategory":"PACKAGE-MANAGER","referenceType":"purl","referenceLocator":"` + purl + `"}]}`)
	}
	cw.str(`],"files":[`)
	for i, e := range ecos {
		if i > 0 {
			cw.str(",")
		}
		cw.str(`{"fileName":"` + e.file + `","SPDXID":"` + e.fileID + `","checksums":[{"algorithm":"SHA1","checksumValue":"` +
			fmt.Sprintf("%040x", rng.Uint64()) + `"}],"licenseConcluded":"NOASSERTION","copyrightText":""}`)
	}
	cw.str(`],"relationships":[{"spdxElementId":"SPDXRef-DOCUMENT","relatedSpdxElement":"SPDXRef-DocumentRoot-Directory-monorepo","relationshipType":"DESCRIBES"}`)
	for i, id := range ids {
		cw.str(`,{"spdxElementId":"SPDXRef-DocumentRoot-Directory-monorepo","relatedSpdxElement":"` + id + `","relationshipType":"CONTAINS"}`)
		cw.str(`,{"spdxElementId":"` + id + `","relatedSpdxElement":"` + ecos[i%len(ecos)].fileID +
			`","relationshipType":"OTHER","comment":"evident-by: indicates the package's existence is evident by the given file"}`)
	}
	cw.str(`]}`)
	return len(ids), bw.Flush()
}
