package itest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGradleDocsProperties: every Gradle property the build scripts of
// docs/maven-gradle-setup.md read (Groovy names, Kotlin `by project`) is one
// its gradle.properties block defines, so the snippets work as written.
func TestGradleDocsProperties(t *testing.T) {
	raw, err := os.ReadFile("../docs/maven-gradle-setup.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(groovy|kotlin|properties)\n(.*?)```").FindAllStringSubmatch(string(raw), -1)
	defined := map[string]bool{}
	var kotlin, groovy []string
	for _, b := range blocks {
		switch b[1] {
		case "properties":
			for _, line := range strings.Split(b[2], "\n") {
				if k, _, ok := strings.Cut(line, "="); ok {
					defined[strings.TrimSpace(k)] = true
				}
			}
		case "kotlin":
			kotlin = append(kotlin, b[2])
		case "groovy":
			groovy = append(groovy, b[2])
		}
	}
	if len(defined) == 0 || len(kotlin) == 0 || len(groovy) == 0 {
		t.Fatalf("want gradle.properties, Groovy and Kotlin blocks; %d properties, %d kotlin, %d groovy", len(defined), len(kotlin), len(groovy))
	}
	var read []string
	for _, k := range kotlin {
		if strings.Contains(k, "PasswordCredentials::class") {
			t.Error("the Kotlin snippet reads credentials by repository name, which the properties block does not define")
		}
		for _, m := range regexp.MustCompile(`val (\w+): String by project`).FindAllStringSubmatch(k, -1) {
			read = append(read, m[1])
		}
		if !strings.Contains(k, "username = ") || !strings.Contains(k, "password = ") {
			t.Errorf("the Kotlin snippet sets no credentials:\n%s", k)
		}
	}
	for _, g := range groovy {
		for _, m := range regexp.MustCompile(`(?:username|password)\s+(\w+)`).FindAllStringSubmatch(g, -1) {
			read = append(read, m[1])
		}
	}
	if len(read) < 4 {
		t.Fatalf("found %d property reads in the snippets, want the Kotlin and Groovy ones: %v", len(read), read)
	}
	for _, name := range read {
		if !defined[name] {
			t.Errorf("a snippet reads the property %s, which the gradle.properties block does not define", name)
		}
	}
}
