package crashimage

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Model replays Ops on a data directory that was empty (and durable) when
// the trace began, and keeps, beside what a read would see, what a power
// cut would leave.
//
// A file's bytes survive as of its last fsync or fdatasync; later writes
// are lost (or, in a torn image, some of them survive). Names depend on
// Strict: with Strict, a create, rename, link, unlink or mkdir survives
// only once its directory was fsynced (POSIX's promise, and what a
// careful program assumes); without it, names survive in the order they
// were made (what ext4 and XFS give in practice: their journal commits
// metadata in order). Strict is the stronger test.
type Model struct {
	Strict bool

	rootPath string
	root     *node
	fds      map[int]*open
}

type node struct {
	dir bool
	// A file's bytes now, as of its last sync, and the changes since.
	data, synced []byte
	pending      []change
	// A directory's names now and as of its last sync.
	entries, syncedEntries map[string]*node
}

// change is one write (data at off) or resize (size, data nil).
type change struct {
	off  int64
	data []byte
	size int64
}

type open struct {
	n      *node
	off    int64
	append bool
}

// New returns a Model of the empty directory root.
func New(root string, strict bool) *Model {
	return &Model{Strict: strict, rootPath: filepath.Clean(root), root: newDir(), fds: map[int]*open{}}
}

func newDir() *node {
	return &node{dir: true, entries: map[string]*node{}, syncedEntries: map[string]*node{}}
}

// lookup returns the node at p, or nil, and p's parent directory and base
// name.
func (m *Model) lookup(p string) (n, parent *node, name string, err error) {
	if p == m.rootPath {
		return m.root, nil, "", nil
	}
	rel, ok := strings.CutPrefix(p, m.rootPath+"/")
	if !ok {
		return nil, nil, "", fmt.Errorf("%s is outside %s", p, m.rootPath)
	}
	parts := strings.Split(rel, "/")
	dir := m.root
	for _, part := range parts[:len(parts)-1] {
		next := dir.entries[part]
		if next == nil || !next.dir {
			return nil, nil, "", fmt.Errorf("%s: no directory %s", p, part)
		}
		dir = next
	}
	name = parts[len(parts)-1]
	return dir.entries[name], dir, name, nil
}

// Apply replays one call.
func (m *Model) Apply(op Op) error {
	switch op.Kind {
	case Open:
		n, parent, name, err := m.lookup(op.Path)
		if err != nil {
			return err
		}
		if n == nil {
			if !op.Create {
				return fmt.Errorf("line %d: %s opened but never made", op.Line, op.Path)
			}
			n = &node{}
			parent.entries[name] = n
		}
		if op.Trunc && !n.dir {
			n.resize(0)
		}
		m.fds[op.FD] = &open{n: n, append: op.Append}
	case Close:
		delete(m.fds, op.FD)
	case Seek:
		if f := m.fds[op.FD]; f != nil {
			f.off = op.Off
		}
	case Write:
		f := m.fds[op.FD]
		if f == nil {
			return fmt.Errorf("line %d: write to descriptor %d (%s) never opened", op.Line, op.FD, op.Path)
		}
		off := op.Off
		if off < 0 {
			off = f.off
			if f.append {
				off = int64(len(f.n.data))
			}
			f.off = off + int64(len(op.Data))
		}
		f.n.write(off, op.Data)
	case Truncate:
		n, err := m.target(op)
		if err != nil {
			return err
		}
		if op.Off == -2 && op.Size <= int64(len(n.data)) {
			return nil // fallocate within the file
		}
		n.resize(op.Size)
	case Sync:
		n, err := m.target(op)
		if err != nil {
			return err
		}
		n.sync()
	case SyncAll:
		m.walk(m.root, func(n *node) { n.sync() })
	case Rename, Link:
		n, oldParent, oldName, err := m.lookup(op.Path)
		if err != nil || n == nil {
			return fmt.Errorf("line %d: %v %s: no such file (%v)", op.Line, op.Kind, op.Path, err)
		}
		_, newParent, newName, err := m.lookup(op.Path2)
		if err != nil {
			return err
		}
		if op.Kind == Rename {
			delete(oldParent.entries, oldName)
		}
		newParent.entries[newName] = n
	case Unlink:
		_, parent, name, err := m.lookup(op.Path)
		if err != nil {
			return err
		}
		delete(parent.entries, name)
	case Mkdir:
		_, parent, name, err := m.lookup(op.Path)
		if err != nil {
			return err
		}
		parent.entries[name] = newDir()
	}
	return nil
}

// target is the node an op names by descriptor or, without one, by path.
func (m *Model) target(op Op) (*node, error) {
	if op.FD >= 0 {
		if f := m.fds[op.FD]; f != nil {
			return f.n, nil
		}
	}
	n, _, _, err := m.lookup(op.Path)
	if err == nil && n == nil {
		err = fmt.Errorf("no such file")
	}
	if err != nil {
		return nil, fmt.Errorf("line %d: %s: %w", op.Line, op.Path, err)
	}
	return n, nil
}

func (m *Model) walk(n *node, fn func(*node)) {
	fn(n)
	for _, c := range n.entries {
		if c.dir {
			m.walk(c, fn)
		} else {
			fn(c)
		}
	}
}

func (n *node) write(off int64, data []byte) {
	if end := off + int64(len(data)); end > int64(len(n.data)) {
		n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
	}
	copy(n.data[off:], data)
	n.pending = append(n.pending, change{off: off, data: data})
}

func (n *node) resize(size int64) {
	n.data = resized(n.data, size)
	n.pending = append(n.pending, change{size: size})
}

func resized(b []byte, size int64) []byte {
	if size <= int64(len(b)) {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func (n *node) sync() {
	if n.dir {
		n.syncedEntries = maps.Clone(n.entries)
		return
	}
	n.synced = bytes.Clone(n.data)
	n.pending = nil
}

// Image writes into dir (which must exist and be empty) the files a power
// cut now would leave. With torn set, each write and resize since a file's
// last sync survives or not at random (in order), as the page cache may
// have flushed any of them.
func (m *Model) Image(dir string, torn *rand.Rand) error {
	return m.image(m.root, dir, torn)
}

func (m *Model) image(d *node, path string, torn *rand.Rand) error {
	names := d.entries
	if m.Strict {
		names = d.syncedEntries
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		n, p := names[name], filepath.Join(path, name)
		if n.dir {
			if err := os.Mkdir(p, 0o750); err != nil {
				return err
			}
			if err := m.image(n, p, torn); err != nil {
				return err
			}
			continue
		}
		data := n.synced
		if torn != nil && len(n.pending) > 0 {
			data = bytes.Clone(data)
			for _, c := range n.pending {
				if torn.IntN(2) == 0 {
					continue
				}
				if c.data == nil {
					data = resized(data, c.size)
					continue
				}
				if end := c.off + int64(len(c.data)); end > int64(len(data)) {
					data = resized(data, end)
				}
				copy(data[c.off:], c.data)
			}
		}
		if err := writeSparse(p, data); err != nil {
			return err
		}
	}
	return nil
}

// writeSparse writes data to a new file p, leaving holes where whole 4 KiB
// blocks are zero (the index file is mostly unwritten space).
func writeSparse(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	const block = 4096
	var zero [block]byte
	for off := 0; off < len(data); off += block {
		chunk := data[off:min(off+block, len(data))]
		if bytes.Equal(chunk, zero[:len(chunk)]) {
			continue
		}
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (k Kind) String() string {
	return [...]string{"open", "close", "seek", "write", "truncate", "sync", "sync-all", "rename", "link", "unlink", "mkdir"}[k]
}
