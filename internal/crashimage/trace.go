// Package crashimage rebuilds what a data directory may hold after a power
// cut at any point of a recorded run. The run is recorded with strace
// (every write, truncate, fsync, rename, link, unlink and mkdir the
// process made, with the bytes written); a Model replays it one call at a
// time and, at any point, gives the image a crash would leave: what was
// written but not yet fsynced is lost.
//
// A kill -9 keeps the page cache, so it never loses a write the kernel
// accepted; a power cut does. This package is how the crash-point tests
// (itest/crashpoints_test.go) cut a run at every fsync and between them,
// the way ALICE and LazyFS test storage engines, without a file-system
// layer: strace is a Debian package, a FUSE mount needs privileges.
package crashimage

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// StraceArgs are the arguments that make strace record what Parse reads;
// the log goes to logPath. Paths and data are printed as hex (-xx), so no
// byte needs unquoting, and -s is large enough for any write registryd
// makes (a longer one is refused by Parse, never cut).
func StraceArgs(logPath string) []string {
	return []string{"-f", "-ttt", "-y", "-xx", "-s", strconv.Itoa(maxWrite), "-o", logPath,
		"-e", "trace=" + strings.Join(traced, ",")}
}

const maxWrite = 64 << 20

// traced are the calls that change files. Those that move bytes between
// descriptors without showing them (copy_file_range, splice, sendfile) are
// traced so that Parse can refuse a trace where they wrote a file.
var traced = []string{
	"openat", "open", "creat", "close", "lseek",
	"write", "pwrite64", "writev", "pwritev", "pwritev2",
	"ftruncate", "truncate", "fallocate",
	"fsync", "fdatasync", "sync_file_range", "sync", "syncfs",
	"rename", "renameat", "renameat2", "link", "linkat",
	"unlink", "unlinkat", "mkdir", "mkdirat", "rmdir",
	"copy_file_range", "splice", "sendfile",
}

// Kind is what an Op does.
type Kind int

const (
	Open     Kind = iota // Path opened as FD (Create: O_CREAT; Trunc: O_TRUNC; Append: O_APPEND)
	Close                // FD closed
	Seek                 // FD's offset set to Off
	Write                // Data written at FD's offset (Off < 0) or at Off
	Truncate             // Path (or FD) cut or extended to Size
	Sync                 // FD (a file or a directory) fsynced or fdatasynced
	SyncAll              // sync(2), syncfs(2): everything is durable
	Rename               // Path renamed to Path2
	Link                 // Path2 made a hard link of Path
	Unlink               // Path removed (a file, or an empty directory)
	Mkdir                // directory Path made
)

// Op is one successful call that touched a file under the traced root.
type Op struct {
	Line   int     // in the log, counted from 1
	Time   float64 // when the call began, Unix seconds (strace -ttt)
	Kind   Kind
	FD     int
	Path   string
	Path2  string
	Off    int64
	Size   int64
	Data   []byte
	Create bool
	Trunc  bool
	Append bool
}

// Parse reads an strace log made with StraceArgs and returns, in the order
// they completed, the calls that succeeded on paths under root (absolute).
// Calls that failed, and calls on other files, sockets and pipes, are left
// out. It returns an error for what it cannot replay faithfully: a write
// strace cut short, or bytes moved into a file under root by
// copy_file_range, splice or sendfile.
func Parse(r io.Reader, root string) ([]Op, error) {
	root = filepath.Clean(root)
	under := func(p string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	pending := map[string]string{} // pid -> the first half of an unfinished call
	var ops []Op
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4*maxWrite+1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		pid, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		rest = strings.TrimLeft(rest, " ")
		ts, call, ok := strings.Cut(rest, " ")
		if !ok {
			continue
		}
		if strings.HasSuffix(call, " <unfinished ...>") {
			pending[pid] = ts + " " + strings.TrimSuffix(call, " <unfinished ...>")
			continue
		}
		if strings.HasPrefix(call, "<... ") {
			first, ok := pending[pid]
			if !ok {
				return nil, fmt.Errorf("line %d: a resumed call that never began", n)
			}
			delete(pending, pid)
			_, tail, ok := strings.Cut(call, " resumed>")
			if !ok {
				return nil, fmt.Errorf("line %d: cannot read %q", n, call)
			}
			ts, call, _ = strings.Cut(first, " ")
			call += tail
		}
		if strings.HasPrefix(call, "---") || strings.HasPrefix(call, "+++") {
			continue // signals, exits
		}
		op, ok, err := parseCall(call, under)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if !ok {
			continue
		}
		op.Line = n
		op.Time, _ = strconv.ParseFloat(ts, 64)
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ops, nil
}

// parseCall reads one whole call line: name(args) = result.
func parseCall(call string, under func(string) bool) (Op, bool, error) {
	open := strings.IndexByte(call, '(')
	eq := strings.LastIndex(call, ") = ")
	if open < 0 || eq < 0 {
		return Op{}, false, nil // "= ?" of a call cut by the exit, and the like
	}
	name := call[:open]
	args, err := splitArgs(call[open+1 : eq])
	if err != nil {
		return Op{}, false, fmt.Errorf("%s: %w", name, err)
	}
	result := call[eq+4:]
	if strings.HasPrefix(result, "-1") {
		return Op{}, false, nil // failed: changed nothing
	}
	ret, retPath := fdArg(result)
	var op Op
	fdOf := func(i int) (int, string) {
		if i >= len(args) {
			return -1, ""
		}
		fd, p := fdArg(args[i])
		return int(fd), p
	}
	num := func(i int) int64 {
		if i >= len(args) {
			return 0
		}
		v, _ := strconv.ParseInt(args[i], 0, 64)
		return v
	}
	// atPath is the path argument i, resolved against the directory
	// descriptor argument i-1 when relative.
	atPath := func(dirArg, i int) string {
		p := unhex(strings.Trim(args[i], `"`))
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		dir := ""
		if dirArg >= 0 {
			_, dir = fdArg(args[dirArg])
		}
		return filepath.Join(dir, p)
	}
	switch name {
	case "openat", "open", "creat":
		flags := ""
		if name == "openat" {
			op.Path, flags = atPath(0, 1), args[2]
		} else {
			op.Path = atPath(-1, 0)
			if name == "open" {
				flags = args[1]
			} else {
				flags = "O_CREAT|O_TRUNC"
			}
		}
		if retPath != "" {
			op.Path = retPath
		}
		op.Kind, op.FD = Open, int(ret)
		op.Create = strings.Contains(flags, "O_CREAT")
		op.Trunc = strings.Contains(flags, "O_TRUNC")
		op.Append = strings.Contains(flags, "O_APPEND")
	case "close":
		op.Kind = Close
		op.FD, op.Path = fdOf(0)
	case "lseek":
		op.Kind, op.Off = Seek, ret
		op.FD, op.Path = fdOf(0)
	case "write", "pwrite64":
		op.Kind, op.Off = Write, -1
		op.FD, op.Path = fdOf(0)
		if !under(op.Path) {
			return Op{}, false, nil
		}
		data, err := hexString(args[1])
		if err != nil {
			return Op{}, false, err
		}
		if int64(len(data)) < ret {
			return Op{}, false, fmt.Errorf("%s of %d bytes shown cut to %d: raise -s", name, ret, len(data))
		}
		op.Data = data[:ret]
		if name == "pwrite64" {
			op.Off = num(3)
		}
	case "writev", "pwritev", "pwritev2":
		if _, p := fdOf(0); under(p) {
			return Op{}, false, fmt.Errorf("%s on %s: vectored writes are not replayed", name, p)
		}
		return Op{}, false, nil
	case "ftruncate":
		op.Kind, op.Size = Truncate, num(1)
		op.FD, op.Path = fdOf(0)
	case "truncate":
		op.Kind, op.Size, op.FD = Truncate, num(1), -1
		op.Path = atPath(-1, 0)
	case "fallocate":
		// Mode 0 extends the file to off+len; FALLOC_FL_KEEP_SIZE and the
		// others leave its size (and its bytes) alone.
		op.FD, op.Path = fdOf(0)
		if args[1] != "0" {
			return Op{}, false, nil
		}
		op.Kind, op.Size, op.Off = Truncate, num(2)+num(3), -2 // -2: extend only
	case "fsync", "fdatasync", "sync_file_range":
		// sync_file_range makes no promise about durability (no metadata,
		// no disk cache flush): it is no Sync.
		if name == "sync_file_range" {
			return Op{}, false, nil
		}
		op.Kind = Sync
		op.FD, op.Path = fdOf(0)
	case "sync", "syncfs":
		return Op{Kind: SyncAll, FD: -1}, true, nil
	case "rename", "renameat", "renameat2", "link", "linkat":
		op.Kind, op.FD = Rename, -1
		if strings.HasPrefix(name, "link") {
			op.Kind = Link
		}
		if name == "rename" || name == "link" {
			op.Path, op.Path2 = atPath(-1, 0), atPath(-1, 1)
		} else {
			op.Path, op.Path2 = atPath(0, 1), atPath(2, 3)
		}
		if under(op.Path) || under(op.Path2) {
			return op, true, nil
		}
		return Op{}, false, nil
	case "unlink", "rmdir":
		op.Kind, op.FD, op.Path = Unlink, -1, atPath(-1, 0)
	case "unlinkat":
		op.Kind, op.FD, op.Path = Unlink, -1, atPath(0, 1)
	case "mkdir":
		op.Kind, op.FD, op.Path = Mkdir, -1, atPath(-1, 0)
	case "mkdirat":
		op.Kind, op.FD, op.Path = Mkdir, -1, atPath(0, 1)
	case "copy_file_range", "splice", "sendfile":
		// The descriptor written to is the third argument of
		// copy_file_range and splice, the first of sendfile.
		i := 2
		if name == "sendfile" {
			i = 0
		}
		if _, p := fdOf(i); under(p) && ret > 0 {
			return Op{}, false, fmt.Errorf("%s wrote %d bytes into %s that the trace does not show", name, ret, p)
		}
		return Op{}, false, nil
	default:
		return Op{}, false, nil
	}
	if !under(op.Path) {
		return Op{}, false, nil
	}
	return op, true, nil
}

// splitArgs splits a call's arguments at the commas outside quotes,
// brackets and braces.
func splitArgs(s string) ([]string, error) {
	var out []string
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted:
			if c == '\\' {
				i++
			} else if c == '"' {
				quoted = false
			}
		case c == '"':
			quoted = true
		case c == '[' || c == '{' || c == '<' || c == '(':
			depth++
		case c == ']' || c == '}' || c == '>' || c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if quoted || depth != 0 {
		return nil, errors.New("unbalanced arguments")
	}
	return append(out, strings.TrimSpace(s[start:])), nil
}

// fdArg reads "7</path>" (a descriptor annotated by -y) as 7 and the path,
// which strace prints hex-encoded under -xx; a plain number has no path.
func fdArg(s string) (int64, string) {
	num, rest, _ := strings.Cut(s, "<")
	fd, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil {
		fd = -1
	}
	if rest == "" {
		return fd, ""
	}
	p := unhex(strings.TrimSuffix(rest, ">"))
	// A file unlinked while open is shown as "path (deleted)".
	p = strings.TrimSuffix(p, " (deleted)")
	if !filepath.IsAbs(p) {
		return fd, "" // socket:[…], pipe:[…], anon_inode:…
	}
	return fd, filepath.Clean(p)
}

// unhex decodes strace's \xNN escapes (all of a -xx string is escaped).
func unhex(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	b, err := hexBytes(s)
	if err != nil {
		return s
	}
	return string(b)
}

// hexString reads a quoted -xx data argument; a trailing "..." means
// strace cut it.
func hexString(arg string) ([]byte, error) {
	arg = strings.TrimSuffix(arg, "...")
	if len(arg) < 2 || arg[0] != '"' || arg[len(arg)-1] != '"' {
		return nil, fmt.Errorf("not a string: %.40q", arg)
	}
	return hexBytes(arg[1 : len(arg)-1])
}

func hexBytes(s string) ([]byte, error) {
	if len(s)%4 != 0 {
		return nil, fmt.Errorf("not \\xNN escapes: %.40q", s)
	}
	digits := make([]byte, 0, len(s)/2)
	for i := 0; i < len(s); i += 4 {
		if s[i] != '\\' || s[i+1] != 'x' {
			return nil, fmt.Errorf("not \\xNN escapes: %.40q", s[i:])
		}
		digits = append(digits, s[i+2], s[i+3])
	}
	out := make([]byte, len(digits)/2)
	_, err := hex.Decode(out, digits)
	return out, err
}
