#!/bin/sh
# Regenerates oracle.tsv: version pairs from the test generator, ordered by Maven's own
# ComparableVersion. Needs a JDK and Debian's maven (maven3-artifact.jar, Maven 3.8.7,
# whose ComparableVersion is the 3.9 one: MNG-7644 was backported to 3.8.x).
#   apt-get install -y maven default-jdk-headless
# Run from maven/testdata/versions.
set -eu
jar=${MAVEN_ARTIFACT_JAR:-/usr/share/java/maven3-artifact.jar}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/Oracle.java" <<'JAVA'
import org.apache.maven.artifact.versioning.ComparableVersion;
import java.io.*;
import java.nio.charset.StandardCharsets;

public class Oracle {
    public static void main(String[] args) throws Exception {
        BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter w = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        for (String line; (line = r.readLine()) != null; ) {
            String[] p = line.split("\t", -1);
            int c = new ComparableVersion(p[0]).compareTo(new ComparableVersion(p[1]));
            w.println(p[0] + "\t" + p[1] + "\t" + Integer.signum(c));
        }
        w.flush();
    }
}
JAVA
javac -cp "$jar" -d "$tmp" "$tmp/Oracle.java"
(cd ../../ && REGISTRYD_VERSION_PAIRS="$tmp/pairs.tsv" go test -count=1 -run '^TestWriteVersionPairs$' . >/dev/null)
java -cp "$jar:$tmp" Oracle <"$tmp/pairs.tsv" >oracle.tsv
wc -l oracle.tsv
