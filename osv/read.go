package osv

import (
	"archive/zip"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"path"
	"strings"

	"registryd/store"
)

// MaxRecordBytes bounds one record file (GitHub's largest records, with
// thousands of enumerated versions, are about 1 MB).
const MaxRecordBytes = 8 << 20

// Stats count what a read skipped.
type Stats struct {
	// Files is the number of record files read (one record, or a stream).
	Files int `json:"files"`
	// NotOSV counts JSON documents that are not OSV records (an archive's
	// other files: the Go module's CVE records, indexes).
	NotOSV int `json:"not_osv_files"`
	// Invalid counts records with an impossible value (an id too long).
	Invalid int `json:"invalid_files"`
}

// recordFile says whether an archive or directory entry holds records:
// *.json holds one (or a JSON array), *.nedb, *.ndjson and *.jsonl hold
// one a line (Renovate's osv-offline files are .nedb).
func recordFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".json", ".nedb", ".ndjson", ".jsonl":
		return true
	}
	return false
}

// ReadZip yields the advisories of a zip archive: osv.dev's per-ecosystem
// all.zip (one record per file), or any archive of record files at any
// depth (the golang.org/x/vulndb module's zip has them under data/osv).
func ReadZip(r io.ReaderAt, size int64, stats *Stats) iter.Seq2[*store.Advisory, error] {
	return func(yield func(*store.Advisory, error) bool) {
		zr, err := zip.NewReader(r, size)
		if err != nil {
			yield(nil, fmt.Errorf("the archive is not a zip file: %w", err))
			return
		}
		br := newFileReader()
		for _, f := range zr.File {
			if f.FileInfo().IsDir() || !recordFile(f.Name) {
				continue
			}
			if f.UncompressedSize64 > MaxRecordBytes && !streamFile(f.Name) {
				stats.Invalid++
				continue
			}
			rc, err := f.Open()
			if err != nil {
				yield(nil, fmt.Errorf("%s: %w", f.Name, err))
				return
			}
			ok := readFile(f.Name, rc, br, stats, yield)
			rc.Close()
			if !ok {
				return
			}
		}
	}
}

// ReadDir yields the advisories of the record files under a directory,
// walked in lexical order.
func ReadDir(fsys fs.FS, stats *Stats) iter.Seq2[*store.Advisory, error] {
	return func(yield func(*store.Advisory, error) bool) {
		stop := errors.New("stop")
		br := newFileReader()
		err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !recordFile(p) {
				return nil
			}
			f, err := fsys.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if !readFile(p, f, br, stats, yield) {
				return stop
			}
			return nil
		})
		if err != nil && !errors.Is(err, stop) {
			yield(nil, err)
		}
	}
}

// ReadStream yields the advisories of one stream: a record, a JSON array
// of records, or records one after the other (NDJSON).
func ReadStream(r io.Reader, stats *Stats) iter.Seq2[*store.Advisory, error] {
	return func(yield func(*store.Advisory, error) bool) {
		readFile("", r, newFileReader(), stats, yield)
	}
}

func streamFile(name string) bool {
	return strings.ToLower(path.Ext(name)) != ".json"
}

// newFileReader is the buffer readFile reuses from file to file.
func newFileReader() *bufio.Reader { return bufio.NewReaderSize(nil, 64<<10) }

// readFile reads the records of one file and reports whether to go on.
func readFile(name string, r io.Reader, br *bufio.Reader, stats *Stats, yield func(*store.Advisory, error) bool) bool {
	stats.Files++
	if !streamFile(name) && name != "" {
		r = io.LimitReader(r, MaxRecordBytes+1)
	}
	// A broken file of an archive or directory is counted and skipped; a
	// broken stream (an upload cut short) fails the read.
	bad := func(err error) bool {
		if name != "" {
			stats.Invalid++
			return true
		}
		return yield(nil, fmt.Errorf("not JSON: %w", err))
	}
	br.Reset(r)
	first, err := firstByte(br)
	if errors.Is(err, io.EOF) {
		return true
	}
	if err != nil {
		return yield(nil, err)
	}
	dec := json.NewDecoder(br)
	inArray := first == '['
	if inArray {
		if _, err := dec.Token(); err != nil {
			return bad(err)
		}
	}
	for {
		if inArray && !dec.More() {
			return true
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) && !inArray {
				return true
			}
			return bad(err)
		}
		if len(raw) > MaxRecordBytes {
			stats.Invalid++
			continue
		}
		a, err := Decode(raw)
		switch {
		case errors.Is(err, ErrNotOSV):
			stats.NotOSV++
		case err != nil:
			stats.Invalid++
		default:
			if !yield(a, nil) {
				return false
			}
		}
	}
}

// firstByte peeks at the first byte that is not JSON white space.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b, br.UnreadByte()
	}
}
