#!/bin/sh
# Regenerates the real-* cases: maven-metadata.xml documents written by real Maven
# (Debian's Maven 3.8.7, maven-deploy-plugin 3.0.0) deploying into two file://
# repositories, offline (a mirror of everything to a missing directory keeps Maven
# off the network; the plugins come from Debian's /usr/share/maven-repo).
#   apt-get install -y maven libmaven-deploy-plugin-java libmaven-install-plugin-java
# Run from maven/testdata/metadata, then review and refresh the expected
# merges: go test ./maven -run TestMetadataGolden -update
#
# Two things this cannot produce, hence the made-up cases in Maven Central's format:
#   - group-level metadata with <plugins>: a plugin project builds offline here
#     (maven-plugin-plugin 3.7.1 is in Debian), but with Maven 3.8.7 that plugin
#     leaves the group-level document to Maven 3.9's core (MNG-7055), so none is
#     deployed;
#   - Maven Central's element order: Debian builds maven-repository-metadata with a
#     writer that puts <version> after <versioning> and <snapshot> after
#     <lastUpdated>, where Maven's model and Central have them before.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -rs /usr/share/maven-repo "$tmp/m2" # writable local repository over Debian's
cat >"$tmp/settings.xml" <<XML
<settings><mirrors><mirror><id>none</id><mirrorOf>*</mirrorOf><url>file://$tmp/nowhere</url></mirror></mirrors></settings>
XML
echo demo >"$tmp/a.txt"
(cd "$tmp" && jar cf demo.jar a.txt)
deploy() { # repo version
	mvn -B -q -s "$tmp/settings.xml" -Dmaven.repo.local="$tmp/m2" \
		org.apache.maven.plugins:maven-deploy-plugin:3.0.0:deploy-file \
		-Dfile="$tmp/demo.jar" -DgroupId=com.example -DartifactId=demo -Dversion="$2" \
		-Dpackaging=jar -Durl="file://$tmp/$1" >/dev/null
}
for v in 1.0 1.1 2.0-beta-1; do deploy repoA $v; done
for v in 1.1 1.2; do deploy repoB $v; done
sleep 1 # so that repoB's lastUpdated is the newer one
deploy repoB 2.0
deploy repoA 1.0-SNAPSHOT
deploy repoA 1.0-SNAPSHOT # a second build: buildNumber 2
sleep 1
deploy repoB 1.0-SNAPSHOT

mkdir -p real-artifact real-snapshot
cp "$tmp/repoA/com/example/demo/maven-metadata.xml" real-artifact/upstream-1.xml
cp "$tmp/repoB/com/example/demo/maven-metadata.xml" real-artifact/upstream-2.xml
cp "$tmp/repoA/com/example/demo/1.0-SNAPSHOT/maven-metadata.xml" real-snapshot/upstream-1.xml
cp "$tmp/repoB/com/example/demo/1.0-SNAPSHOT/maven-metadata.xml" real-snapshot/upstream-2.xml
