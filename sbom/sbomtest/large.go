// Package sbomtest writes large, realistic CycloneDX SBOMs and measures the
// memory reading or uploading one takes. It serves the SBOM benchmarks of
// sbom/ (reading alone) and admin/ (an upload through the handler onto a
// real store); nothing else imports it.
package sbomtest

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/package-url/packageurl-go"

	"registryd/store"
)

// countingWriter counts what goes through it.
type countingWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) str(s string) { _, _ = c.w.WriteString(s); c.n += int64(len(s)) }

// WriteLarge writes a deterministic CycloneDX 1.5 SBOM of about size
// bytes and returns how many components (nested ones included) it lists.
// Dense components are what cyclonedx-gomod, cyclonedx-npm or syft write
// for big trees (name, version, purl, bom-ref, a license, a few properties:
// about 450 bytes); rich ones are cdxgen's with hashes, descriptions,
// external references and evidence (about 2 KB).
func WriteLarge(w io.Writer, size int64, dense bool) (int, error) {
	return WriteLargeSpec(w, size, dense, "1.5")
}

// WriteLargeSpec is WriteLarge with another specVersion ("1.7": what 1.7
// adds is nothing a dependency list reads, so the body is the same).
func WriteLargeSpec(w io.Writer, size int64, dense bool, spec string) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &countingWriter{w: bw}
	rng := rand.New(rand.NewPCG(1, 2))
	hex := func(n int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, n)
		for i := range b {
			b[i] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	words := strings.Fields("the a library for parsing and writing data with fast streaming support of common " +
		"formats utilities collections logging http client server json xml yaml crypto testing")
	sentence := func(n int) string {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(words[rng.IntN(len(words))])
		}
		return sb.String()
	}
	licenses := []string{`[{"license":{"id":"Apache-2.0"}}]`, `[{"license":{"id":"MIT","url":"https://opensource.org/licenses/MIT"}}]`,
		`[{"expression":"(MIT OR Apache-2.0) AND BSD-3-Clause"}]`, `[{"license":{"name":"Bouncy Castle Licence"}}]`,
		`[{"license":{"id":"EPL-2.0"}},{"license":{"id":"GPL-2.0-with-classpath-exception"}}]`}
	type eco struct{ purl, file, prop string }
	ecos := []eco{
		{"maven", "/builds/acme/monorepo/services/api/pom.xml", "cdx:maven:component_scope"},
		{"npm", "/builds/acme/monorepo/web/package-lock.json", "cdx:npm:package:development"},
		{"pypi", "/builds/acme/monorepo/ml/requirements.txt", "cdx:pypi:requiresDist"},
		{"golang", "/builds/acme/monorepo/tools/go.mod", "cdx:go:indirect"},
	}
	var refs []string
	var component func(i int, nested bool)
	component = func(i int, nested bool) {
		e := ecos[i%len(ecos)]
		group := "org.example.g" + strconv.Itoa(i%97)
		name := "component-" + strconv.Itoa(i) + "-" + sentence(1)
		version := fmt.Sprintf("%d.%d.%d", rng.IntN(10), rng.IntN(30), rng.IntN(100))
		var quals packageurl.Qualifiers
		if e.purl == packageurl.TypeMaven {
			quals = packageurl.Qualifiers{{Key: "type", Value: "jar"}}
		}
		purl := packageurl.NewPackageURL(e.purl, group, name, version, quals, "").ToString()
		refs = append(refs, purl)
		if dense {
			cw.str(`{"type":"library","bom-ref":"` + purl + `","group":"` + group + `","name":"` + name + `","version":"` + version +
				`","licenses":` + licenses[i%len(licenses)] + `,"purl":"` + purl + `","properties":[{"name":"SrcFile","value":"` + e.file +
				`"},{"name":"` + e.prop + `","value":"` + sentence(1) + `"}]`)
		} else {
			cw.str(`{"group":"` + group + `","name":"` + name + `","version":"` + version + `","description":"` + sentence(12) +
				`","scope":"required","hashes":[{"alg":"SHA-512","content":"` + hex(128) + `"},{"alg":"SHA-1","content":"` + hex(40) +
				`"}],"licenses":` + licenses[i%len(licenses)] + `,"purl":"` + purl + `","type":"library","bom-ref":"` + purl +
				`","externalReferences":[{"type":"vcs","url":"https://github.com/example/` + name + `"},{"type":"website","url":"https://example.org/` +
				name + `"},{"type":"distribution","url":"https://repo.example.org/` + group + `/` + name + `/` + version + `"}]` +
				`,"properties":[{"name":"SrcFile","value":"` + e.file + `"},{"name":"` + e.prop + `","value":"` + sentence(2) +
				`"},{"name":"ResolvedUrl","value":"https://repo.example.org/` + name + `-` + version + `.tgz"},{"name":"Namespaces","value":"` +
				sentence(40) + `"}],"evidence":{"identity":{"field":"purl","confidence":1,"methods":[{"technique":"manifest-analysis","confidence":1,"value":"` +
				e.file + `"}]},"occurrences":[{"location":"` + e.file + `"}]}`)
		}
		if !nested && i%10 == 0 {
			cw.str(`,"components":[`)
			for j := 0; j < 2; j++ {
				if j > 0 {
					cw.str(",")
				}
				component(i*1000+j+1_000_000, true)
			}
			cw.str(`]`)
		}
		cw.str(`}`)
	}
	cw.str(`{"bomFormat":"CycloneDX","specVersion":"` + spec + `","serialNumber":"urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79","version":1,` +
		`"metadata":{"timestamp":"2026-11-21T10:04:05Z","tools":{"components":[{"group":"@cyclonedx","name":"cdxgen","version":"10.9.4","type":"application"}]},` +
		`"component":{"name":"monorepo","version":"1.0.0","type":"application","bom-ref":"pkg:generic/monorepo@1.0.0"}},"components":[`)
	// Components take about 70 % of the document, the dependency graph and
	// the vulnerabilities the rest.
	for i := 0; cw.n < size*70/100; i++ {
		if i > 0 {
			cw.str(",")
		}
		component(i, false)
	}
	cw.str(`],"dependencies":[`)
	for i, ref := range refs {
		if i > 0 {
			cw.str(",")
		}
		cw.str(`{"ref":"` + ref + `","dependsOn":[`)
		for j := 0; j < 1+i%5; j++ {
			if j > 0 {
				cw.str(",")
			}
			cw.str(`"` + refs[rng.IntN(len(refs))] + `"`)
		}
		cw.str(`]}`)
		if cw.n >= size*95/100 {
			break
		}
	}
	cw.str(`],"vulnerabilities":[`)
	for i := 0; cw.n < size-4; i++ {
		if i > 0 {
			cw.str(",")
		}
		cw.str(`{"bom-ref":"vuln-` + strconv.Itoa(i) + `","id":"CVE-2026-` + strconv.Itoa(10000+i) + `","source":{"name":"NVD"},` +
			`"ratings":[{"severity":"` + store.Severities[i%4] + `","method":"CVSSv31","score":7.5}],"description":"` + sentence(30) +
			`","affects":[{"ref":"` + refs[(i*37)%len(refs)] + `"},{"ref":"` + refs[(i*91)%len(refs)] + `"}]}`)
	}
	cw.str(`]}`)
	return len(refs), bw.Flush()
}

// LargeFile writes an SBOM of about size bytes into a temp file.
func LargeFile(tb testing.TB, size int64, dense bool) (path string, n int64, comps int) {
	return LargeFileOf(tb, func(w io.Writer) (int, error) { return WriteLarge(w, size, dense) })
}

// LargeFileOf writes the SBOM write makes into a temp file.
func LargeFileOf(tb testing.TB, write func(io.Writer) (int, error)) (path string, n int64, comps int) {
	tb.Helper()
	path = filepath.Join(tb.TempDir(), "sbom.json")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if comps, err = write(f); err != nil {
		tb.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	return path, fi.Size(), comps
}
