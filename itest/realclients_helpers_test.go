package itest

// Helpers of the real-client tests: a Maven-layout upstream made from Debian's
// /usr/share/maven-repo, a static server for it that logs every request, and
// runners for mvn and gradle that cannot reach beyond loopback.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// debianMavenRepo is where Debian's lib*-java packages install their POMs and
// (symlinks to) their jars in Maven layout.
const debianMavenRepo = "/usr/share/maven-repo"

// toolTimeout bounds one mvn or gradle run. It is a safety net against a
// hung build, not an assertion about speed.
const toolTimeout = 5 * time.Minute

// realClientLibs are the test projects' dependencies: group path, artifact and
// the Debian package that provides them.
var realClientLibs = []struct {
	key, group, artifact, pkg string
}{
	{"CommonsLang3", "org/apache/commons", "commons-lang3", "libcommons-lang3-java"},
	{"Guava", "com/google/guava", "guava", "libguava-java"},
	{"JUnit", "junit", "junit", "junit4"},
}

// mavenPlugins are the plugins `mvn package` runs on a jar project; Maven
// 3.8's default versions are relocation POMs in Debian that point at the
// packaged versions, which must be installed too.
var mavenPlugins = []struct{ artifact, pkg string }{
	{"maven-resources-plugin", "libmaven-resources-plugin-java"},
	{"maven-compiler-plugin", "libmaven-compiler-plugin-java"},
	{"maven-surefire-plugin", "libsurefire-java"},
	{"maven-jar-plugin", "libmaven-jar-plugin-java"},
}

// requireTools skips the test, naming what to install, when a client or a
// Debian package the projects need is missing.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	for _, tool := range append([]string{"java", "javac"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, "the "+tool+" command")
		}
	}
	for _, lib := range realClientLibs {
		if releaseVersion(filepath.Join(debianMavenRepo, lib.group, lib.artifact)) == "" {
			missing = append(missing, lib.pkg)
		}
	}
	if slices.Contains(tools, "mvn") {
		for _, p := range mavenPlugins {
			if !dirExists(filepath.Join(debianMavenRepo, "org/apache/maven/plugins", p.artifact)) {
				missing = append(missing, p.pkg)
			}
		}
	}
	if len(missing) > 0 {
		t.Skipf("real-client test needs %s; on Debian: install the packages of .ci/packages (as .ci/run does; "+
			"javac is default-jdk-headless's)", strings.Join(missing, ", "))
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// releaseVersion is the highest real version of an artifact in a Maven
// directory: Debian adds the pseudo-versions "debian" and "N.x", which no
// published project names.
func releaseVersion(artifactDir string) string {
	entries, err := os.ReadDir(artifactDir)
	if err != nil {
		return ""
	}
	var versions []string
	for _, e := range entries {
		v := e.Name()
		if e.IsDir() && v != "debian" && !strings.HasSuffix(v, ".x") && v[0] >= '0' && v[0] <= '9' {
			versions = append(versions, v)
		}
	}
	slices.SortFunc(versions, compareVersions)
	if len(versions) == 0 {
		return ""
	}
	return versions[len(versions)-1]
}

// compareVersions orders Maven versions well enough for a test fixture:
// numeric parts numerically, a qualifier below a release ("1.0-beta" <
// "1.0"), anything else as text.
func compareVersions(a, b string) int {
	split := func(v string) []string {
		return strings.FieldsFunc(v, func(r rune) bool { return r == '.' || r == '-' })
	}
	pa, pb := split(a), split(b)
	for i := 0; i < min(len(pa), len(pb)); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		switch {
		case ea == nil && eb == nil:
			if na != nb {
				return na - nb
			}
		case ea == nil:
			return 1
		case eb == nil:
			return -1
		default:
			if c := strings.Compare(pa[i], pb[i]); c != 0 {
				return c
			}
		}
	}
	// "1.0" < "1.0.1", but "1.0-beta" < "1.0".
	switch {
	case len(pa) > len(pb):
		if _, err := strconv.Atoi(pa[len(pb)]); err != nil {
			return -1
		}
		return 1
	case len(pa) < len(pb):
		if _, err := strconv.Atoi(pb[len(pa)]); err != nil {
			return 1
		}
		return -1
	}
	return 0
}

// mavenFixture is a Maven-layout repository in a temp dir, made from
// Debian's, with the checksum sidecars and metadata Debian's lacks.
type mavenFixture struct {
	Root string
	// Versions of the realClientLibs, by key of realClientLibs (CommonsLang3, ...).
	Versions map[string]string
	Files    int
}

// digests of one file, hex.
type digests struct{ md5, sha1, sha256, sha512 string }

// makeMavenFixture copies Debian's Maven repository into root, following
// the jars' symlinks into /usr/share/java, and writes .md5, .sha1, .sha256
// and .sha512 next to every file and a maven-metadata.xml (with its own
// sidecars) in every groupId/artifactId directory.
//
// It copies all of it: the project's realClientLibs are three artifacts, but
// Maven's plugins pull in a closure of hundreds (plexus, maven-shared, asm,
// ...) that changes with every Debian release, so working it out by parsing
// POMs would be more fragile than copying a few hundred MB once per test run.
func makeMavenFixture(root string) (*mavenFixture, error) {
	fx := &mavenFixture{Root: root, Versions: map[string]string{}}
	if err := copyTreeFollowingLinks(debianMavenRepo, fx.Root, func(dst string) error {
		fx.Files++
		return writeSidecars(dst)
	}); err != nil {
		return nil, fmt.Errorf("building the Maven fixture: %w", err)
	}
	if err := writeAllMetadata(fx.Root); err != nil {
		return nil, fmt.Errorf("writing maven-metadata.xml: %w", err)
	}
	for _, lib := range realClientLibs {
		fx.Versions[lib.key] = releaseVersion(filepath.Join(fx.Root, lib.group, lib.artifact))
	}
	return fx, nil
}

// sharedFixture is the one Maven fixture of the test binary, built by the
// first test that needs it.
var sharedFixture struct {
	once sync.Once
	fx   *mavenFixture
	err  error
}

// sharedMavenFixture returns the package's Maven fixture, building it on
// first use. It is shared by every real-client test (building it copies
// and hashes every file of Debian's repository), so it is READ-ONLY: a test
// that wants an upstream to serve something else says so to its repoServer
// (repoServer.Lie), never by writing into fx.Root. It lives beside the
// registryd binary, in the directory TestMain removes when the run ends.
func sharedMavenFixture(t *testing.T) *mavenFixture {
	t.Helper()
	sharedFixture.once.Do(func() {
		dir, err := os.MkdirTemp(filepath.Dir(binary), "maven-fixture-")
		if err != nil {
			sharedFixture.err = err
			return
		}
		sharedFixture.fx, sharedFixture.err = makeMavenFixture(dir)
	})
	if sharedFixture.err != nil {
		t.Fatal(sharedFixture.err)
	}
	return sharedFixture.fx
}

// copyTreeFollowingLinks copies src to dst; symlinks are replaced by what
// they point at, dangling ones are left out (a half-removed package leaves
// them). done is called for every regular file written.
func copyTreeFollowingLinks(src, dst string, done func(dst string) error) error {
	return copyDirFollowing(src, dst, 0, done)
}

func copyDirFollowing(src, dst string, depth int, done func(string) error) error {
	// A symlink loop would recurse forever; Maven layouts are a dozen deep.
	if depth > 40 {
		return fmt.Errorf("%s: directory nesting too deep (symlink loop?)", src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		fi, err := os.Stat(s) // follows symlinks
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := copyDirFollowing(s, d, depth+1, done); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyRegularFile(s, d); err != nil {
				return err
			}
			if err := done(d); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyRegularFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func fileDigests(p string) (digests, error) {
	f, err := os.Open(p)
	if err != nil {
		return digests{}, err
	}
	defer f.Close()
	hs := []hash.Hash{md5.New(), sha1.New(), sha256.New(), sha512.New()}
	if _, err := io.Copy(io.MultiWriter(hs[0], hs[1], hs[2], hs[3]), f); err != nil {
		return digests{}, err
	}
	h := func(i int) string { return hex.EncodeToString(hs[i].Sum(nil)) }
	return digests{md5: h(0), sha1: h(1), sha256: h(2), sha512: h(3)}, nil
}

// writeSidecars writes the four checksum files of p, each holding the
// lower-case hex digest only, as Maven Central's do.
func writeSidecars(p string) error {
	d, err := fileDigests(p)
	if err != nil {
		return err
	}
	for ext, v := range map[string]string{".md5": d.md5, ".sha1": d.sha1, ".sha256": d.sha256, ".sha512": d.sha512} {
		if err := os.WriteFile(p+ext, []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

var metadataTemplate = template.Must(template.New("metadata").Parse(`<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>{{.Group}}</groupId>
  <artifactId>{{.Artifact}}</artifactId>
  <versioning>
    <latest>{{.Latest}}</latest>{{if .Release}}
    <release>{{.Release}}</release>{{end}}
    <versions>{{range .Versions}}
      <version>{{.}}</version>{{end}}
    </versions>
    <lastUpdated>{{.LastUpdated}}</lastUpdated>
  </versioning>
</metadata>
`))

// writeAllMetadata writes groupId/artifactId/maven-metadata.xml wherever a
// directory holds version directories with a POM, listing those versions.
func writeAllMetadata(root string) error {
	artifactDirs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".pom") {
			artifactDirs[filepath.Dir(filepath.Dir(p))] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	for dir := range artifactDirs {
		rel, err := filepath.Rel(root, dir)
		if err != nil || !strings.Contains(rel, string(filepath.Separator)) {
			continue // a POM directly under root has no groupId
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var versions []string
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if poms, _ := filepath.Glob(filepath.Join(dir, e.Name(), "*.pom")); len(poms) > 0 {
				versions = append(versions, e.Name())
			}
		}
		slices.SortFunc(versions, compareVersions)
		release := releaseVersion(dir)
		var buf bytes.Buffer
		if err := metadataTemplate.Execute(&buf, map[string]any{
			"Group":    strings.ReplaceAll(filepath.Dir(rel), string(filepath.Separator), "."),
			"Artifact": filepath.Base(rel), "Versions": versions, "Latest": versions[len(versions)-1],
			"Release": release, "LastUpdated": "20260101000000",
		}); err != nil {
			return err
		}
		p := filepath.Join(dir, "maven-metadata.xml")
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			return err
		}
		if err := writeSidecars(p); err != nil {
			return err
		}
	}
	return nil
}

// --- the static upstream ---

// repoRequest is one request the static upstream answered.
type repoRequest struct {
	Method, Path string
	Status       int
	// Lied is set when the answer was a repoLie rather than the file.
	Lied bool
}

func (r repoRequest) String() string {
	s := fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status)
	if r.Lied {
		s += " (lie)"
	}
	return s
}

// repoServer serves a directory in Maven layout on loopback. Made by
// serveRepo it is a plain static repository (nginx, Apache): GET and HEAD,
// Range, Last-Modified, and an ETag (the quoted SHA-1) so a proxy can
// revalidate. Made by serveCentralRepo it also sends, like Maven Central,
// Nexus and Artifactory, X-Checksum-Sha1 and X-Checksum-Md5 on every file
// (from the file's sidecars), which a proxy must check the bytes against.
// Either kind can be told to lie about chosen paths (Lie). It logs every
// request.
type repoServer struct {
	URL  string
	root string
	srv  *http.Server
	// checksumHeaders: send X-Checksum-Sha1 / X-Checksum-Md5 (Central-like).
	checksumHeaders bool

	mu   sync.Mutex
	log  []repoRequest
	lies map[string]repoLie
}

// repoLie is what a lying repoServer answers for one path instead of the
// plain truth: Body (when not nil) instead of the file's bytes, and SHA1 /
// MD5 (when not "") instead of the checksum headers the sidecars give. A
// corrupted mirror, whose index still names the real file's digests while
// the bytes it sends are damaged, is Body alone on a Central-like server:
// the headers keep the real file's checksums.
type repoLie struct {
	Body      []byte
	SHA1, MD5 string
}

// serveRepo starts a plain static repoServer for root; it stops when the
// test ends.
func serveRepo(t *testing.T, root string) *repoServer {
	t.Helper()
	return startRepoServer(t, &repoServer{root: root})
}

// serveCentralRepo starts a repoServer for root that sends checksum headers
// like Maven Central; it stops when the test ends.
func serveCentralRepo(t *testing.T, root string) *repoServer {
	t.Helper()
	return startRepoServer(t, &repoServer{root: root, checksumHeaders: true})
}

func startRepoServer(t *testing.T, s *repoServer) *repoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = s.srv.Close()
		<-done
	})
	return s
}

// Lie makes the server answer l for the repository path p ("/g/a/v/f.jar")
// from now on.
func (s *repoServer) Lie(p string, l repoLie) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lies == nil {
		s.lies = map[string]repoLie{}
	}
	s.lies[p] = l
}

type repoStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *repoStatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *repoStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *repoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &repoStatusWriter{ResponseWriter: w}
	p := path.Clean("/" + r.URL.Path)
	s.mu.Lock()
	lie, lying := s.lies[p]
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.log = append(s.log, repoRequest{Method: r.Method, Path: r.URL.Path, Status: sw.status, Lied: lying && sw.status == http.StatusOK})
		s.mu.Unlock()
	}()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(sw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	full := filepath.Join(s.root, filepath.FromSlash(p))
	f, err := os.Open(full)
	if err != nil {
		http.NotFound(sw, r)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		http.NotFound(sw, r)
		return
	}
	h := sw.Header()
	if sum, err := os.ReadFile(full + ".sha1"); err == nil {
		h.Set("ETag", `"`+string(sum)+`"`)
		if s.checksumHeaders {
			h.Set("X-Checksum-Sha1", string(sum))
		}
	}
	if sum, err := os.ReadFile(full + ".md5"); err == nil && s.checksumHeaders {
		h.Set("X-Checksum-Md5", string(sum))
	}
	if lying {
		if lie.SHA1 != "" {
			h.Set("X-Checksum-Sha1", lie.SHA1)
		}
		if lie.MD5 != "" {
			h.Set("X-Checksum-Md5", lie.MD5)
		}
		if lie.Body != nil {
			http.ServeContent(sw, r, fi.Name(), fi.ModTime(), bytes.NewReader(lie.Body))
			return
		}
	}
	http.ServeContent(sw, r, fi.Name(), fi.ModTime(), f)
}

// Requests is a copy of the log.
func (s *repoServer) Requests() []repoRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Count is how many requests were answered so far.
func (s *repoServer) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

func formatRequests(reqs []repoRequest) string {
	var b strings.Builder
	for _, r := range reqs {
		b.WriteString("  " + r.String() + "\n")
	}
	return b.String()
}

// --- test projects ---

// writeProject renders the template projects testdata/<dirs...> into one new
// temp dir with data and returns it: files ending in .tmpl are text/template
// templates (missing keys are errors), the rest are copied as they are.
func writeProject(t *testing.T, data any, dirs ...string) string {
	t.Helper()
	dst := t.TempDir()
	for _, dir := range dirs {
		src := filepath.Join("testdata", dir)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			out := filepath.Join(dst, strings.TrimSuffix(rel, ".tmpl"))
			if d.IsDir() {
				return os.MkdirAll(out, 0o755)
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.HasSuffix(p, ".tmpl") {
				tmpl, err := template.New(rel).Option("missingkey=error").Parse(string(raw))
				if err != nil {
					return err
				}
				var buf bytes.Buffer
				if err := tmpl.Execute(&buf, data); err != nil {
					return err
				}
				raw = buf.Bytes()
			}
			return os.WriteFile(out, raw, 0o644)
		})
		if err != nil {
			t.Fatalf("writing project %s: %v", dir, err)
		}
	}
	return dst
}

// deadProxy is a loopback address nothing listens on. The clients get it as
// their HTTP proxy for every host but loopback, so a request that would
// leave the machine fails at once instead of reaching the internet.
func deadProxy(t *testing.T) (host, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	host, port, _ = net.SplitHostPort(addr)
	return host, port
}

// clientEnv is a minimal environment for mvn and gradle: a temp HOME (no
// ~/.m2, ~/.gradle or ~/.mavenrc of the machine), no /etc/mavenrc, no
// inherited proxy settings.
func clientEnv(home string) []string {
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "MAVEN_SKIP_RC=1", "TERM=dumb"}
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		env = append(env, "JAVA_HOME="+jh)
	}
	return env
}

// runClient runs a build tool in dir and returns its output; a failure or a
// hang fails the test with the output's tail.
func runClient(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runClientErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v (timeout %v)\n%s", name, strings.Join(args, " "), err, toolTimeout, lastLines(out, 150))
	}
	return out
}

// runClientErr runs a build tool in dir and returns its output and how it
// ended. The tool runs in its own process group so a timeout also stops the
// JVMs it forks.
func runClientErr(dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// --- Maven ---

var mavenSettings = template.Must(template.New("settings").Parse(`<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror>
      <id>registryd</id>
      <mirrorOf>*</mirrorOf>
      <url>{{.URL}}</url>
    </mirror>
  </mirrors>{{if .Username}}
  <servers>
    <server>
      <id>registryd</id>
      <username>{{.Username}}</username>
      <password>{{.Password}}</password>
    </server>
  </servers>{{end}}
  <proxies>
    <proxy>
      <id>nowhere-http</id>
      <active>true</active>
      <protocol>http</protocol>
      <host>{{.ProxyHost}}</host>
      <port>{{.ProxyPort}}</port>
      <nonProxyHosts>127.0.0.1|localhost</nonProxyHosts>
    </proxy>
    <proxy>
      <id>nowhere-https</id>
      <active>true</active>
      <protocol>https</protocol>
      <host>{{.ProxyHost}}</host>
      <port>{{.ProxyPort}}</port>
      <nonProxyHosts>127.0.0.1|localhost</nonProxyHosts>
    </proxy>
  </proxies>
</settings>
`))

// mavenRepoAccess is where a client fetches from and with which credentials
// (none for the static upstream).
type mavenRepoAccess struct {
	URL, Username, Password string
	// JavaOpts, when set, are the client JVM's options (MAVEN_OPTS): the
	// trust store of a registryd with a private CA.
	JavaOpts string
}

// mavenBuild builds a fresh copy of the Maven test project with
// `mvn -B -C package` (strict checksums) and a fresh local repository, all
// requests through a mirror of everything at repo. It returns the local
// repository.
func mavenBuild(t *testing.T, fx *mavenFixture, repo mavenRepoAccess) string {
	t.Helper()
	local := filepath.Join(t.TempDir(), "m2-repository")
	out, err := mavenRun(t, fx, repo, local)
	if err != nil {
		t.Fatalf("mvn package: %v (timeout %v)\n%s", err, toolTimeout, lastLines(out, 150))
	}
	return local
}

// runMaven runs `mvn -B -C <goal>` in project with the local repository
// local and settings that send every request to repo (with its
// credentials) and none beyond loopback; it returns mvn's output.
func runMaven(t *testing.T, project string, repo mavenRepoAccess, local, goal string) (string, error) {
	t.Helper()
	work := t.TempDir()
	host, port := deadProxy(t)
	var settings bytes.Buffer
	if err := mavenSettings.Execute(&settings, map[string]string{"URL": repo.URL, "Username": repo.Username,
		"Password": repo.Password, "ProxyHost": host, "ProxyPort": port}); err != nil {
		t.Fatal(err)
	}
	userSettings, globalSettings := filepath.Join(work, "settings.xml"), filepath.Join(work, "global-settings.xml")
	if err := os.WriteFile(userSettings, settings.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// An empty global settings file replaces Debian's, so nothing but ours applies.
	if err := os.WriteFile(globalSettings, []byte("<settings/>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := clientEnv(work)
	if repo.JavaOpts != "" {
		env = append(env, "MAVEN_OPTS="+repo.JavaOpts)
	}
	return runClientErr(project, env, "mvn", "-B", "-C", "-Dstyle.color=never",
		"-s", userSettings, "-gs", globalSettings, "-Dmaven.repo.local="+local, goal)
}

// mavenRun builds a fresh copy of the Maven test project with
// `mvn -B -C package` and the local repository local (which may hold what
// an earlier build left), all requests through a mirror of everything at
// repo. It returns mvn's output, and an error when mvn failed or did not
// build, test and package the project.
func mavenRun(t *testing.T, fx *mavenFixture, repo mavenRepoAccess, local string) (string, error) {
	t.Helper()
	project := writeProject(t, fx.Versions, "maven-project", "realclient-src")
	out, err := runMaven(t, project, repo, local, "package")
	if err != nil {
		return out, err
	}
	if !strings.Contains(out, "BUILD SUCCESS") || !strings.Contains(out, "Tests run: 1, Failures: 0, Errors: 0") {
		return out, errors.New("mvn did not build and test the project")
	}
	jar := filepath.Join(project, "target", "realclient-1.0.jar")
	if _, err := os.Stat(jar); err != nil {
		return out, fmt.Errorf("mvn built no jar: %w", err)
	}
	return out, nil
}

// --- Gradle ---

// gradleBuild builds a fresh copy of the Gradle test project (compile, test,
// jar) with a fresh GRADLE_USER_HOME, resolving only from repo.
func gradleBuild(t *testing.T, fx *mavenFixture, repo mavenRepoAccess) string {
	t.Helper()
	data := map[string]string{"URL": repo.URL, "Username": repo.Username, "Password": repo.Password}
	for k, v := range fx.Versions {
		data[k] = v
	}
	project := writeProject(t, data, "gradle-project", "realclient-src")
	work := t.TempDir()
	userHome := filepath.Join(work, "gradle-user-home")
	if err := os.MkdirAll(userHome, 0o755); err != nil {
		t.Fatal(err)
	}
	host, port := deadProxy(t)
	props := fmt.Sprintf("systemProp.http.proxyHost=%[1]s\nsystemProp.http.proxyPort=%[2]s\n"+
		"systemProp.https.proxyHost=%[1]s\nsystemProp.https.proxyPort=%[2]s\n"+
		"systemProp.http.nonProxyHosts=127.0.0.1|localhost\n", host, port)
	if err := os.WriteFile(filepath.Join(userHome, "gradle.properties"), []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runClient(t, project, clientEnv(work), "gradle", "--no-daemon", "--console=plain", "--stacktrace",
		"--gradle-user-home", userHome, "build")
	if !strings.Contains(out, "BUILD SUCCESSFUL") {
		t.Fatalf("gradle did not build the project:\n%s", lastLines(out, 80))
	}
	jar := filepath.Join(project, "build", "libs", "realclient-1.0.jar")
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("gradle built no jar: %v\n%s", err, lastLines(out, 40))
	}
	if _, err := os.Stat(filepath.Join(project, "build", "test-results", "test", "TEST-com.example.realclient.GreeterTest.xml")); err != nil {
		t.Fatalf("gradle ran no tests: %v\n%s", err, lastLines(out, 40))
	}
	return userHome
}

// --- registryd's metrics ---

// refusals is registryd_upstream_refusals_total of one upstream for one
// reason, read from the admin listener's /metrics; a missing series is 0.
func refusals(t *testing.T, d *Daemon, upstream int64, reason string) float64 {
	t.Helper()
	exposition := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
	v, _ := metricSample(t, exposition, "registryd_upstream_refusals_total",
		map[string]string{"upstream": strconv.FormatInt(upstream, 10), "reason": reason})
	return v
}

// metricSample finds the sample of name whose labels are exactly want, in
// whatever order the exposition writes them.
func metricSample(t *testing.T, exposition []byte, name string, want map[string]string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(string(exposition), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		got := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = strings.Trim(v, `"`)
		}
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if match {
			f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}
