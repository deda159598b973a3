package blob

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

// Digests are the checksums of one blob, lower-case hex.
type Digests struct {
	Size   int64
	MD5    string
	SHA1   string
	SHA256 string
	SHA512 string
}

// Writer writes a new blob to a temp file. Write only writes the file:
// the MD5, SHA-1, SHA-256 and SHA-512 digests are computed by two hashing
// goroutines that read the bytes back from the file (the page cache) behind
// the writer, so a fill's bytes reach its clients at the speed of the disk
// and the network rather than of four hashes in a row (together about 5ms
// of CPU per MB here). Reading the file back rather than handing the hashers
// copies of the chunks costs one copy either way, but it bounds a writer's
// memory to the hashers' read buffers however far they fall behind, and
// never makes the writer wait for them.
//
// The hashers keep pace with a writer that is slower than they are (an
// upstream across the Internet), so the digests are ready when the body
// ends. A writer that outruns them by more than hashLagMax (a fast local
// upstream, whose transfer is bound by CPU) has them wait for the end
// instead: hashing alongside would take the CPU the transfer, and its
// clients, are waiting for. Hashing runs in pieces, each in one of the
// Disk's hashSlots, and yields the processor between pieces.
//
// Finish waits for the hashers; Abort stops them. A Writer is not safe
// for concurrent use.
type Writer struct {
	d      *Disk
	f      *os.File
	name   string
	n      int64
	closed bool
	fault  writeFaultFunc // see Faults

	sums    [4]hash.Hash  // md5, sha1, sha256, sha512
	started bool          // the hashers run
	stop    atomic.Bool   // Abort: the hashers return before their next piece
	quit    chan struct{} // closed with stop set, for hashers waiting for a slot
	wg      sync.WaitGroup

	mu     sync.Mutex
	more   sync.Cond // signalled when bytes arrive, if a hasher is idle
	end    sync.Cond // signalled at the end or on Abort, for hashers that fell behind
	avail  int64     // bytes the hashers may read: Write publishes n here
	ended  bool      // no more bytes: the hashers finish at avail
	idle   int       // hashers waiting for bytes
	behind int       // hashers waiting for the end, having fallen behind
	herr   error     // the first read error of a hasher
}

// hashGroups says which of Writer.sums (md5, sha1, sha256, sha512) each
// hashing goroutine computes: two, for machines with hashing slots to spare,
// each pairing a slow hash with a fast one. Measured here for 64 MB: SHA-512
// 120ms, MD5 90ms, SHA-256 and SHA-1 45ms each (on the CPU's SHA extensions).
var hashGroups = [...][]int{{0, 2}, {1, 3}}

const (
	// hashPiece is how much a hasher reads and hashes before it yields.
	hashPiece = 64 << 10
	// hashLagMax is how far a hasher may fall behind the writer before it
	// leaves the rest for after the end.
	hashLagMax = 4 << 20
)

var hashBufs = sync.Pool{New: func() any { b := make([]byte, hashPiece); return &b }}

// Create starts a new blob in DATA_DIR/tmp.
func (d *Disk) Create() (*Writer, error) {
	f, err := os.CreateTemp(d.tmp, "blob-*")
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	w := &Writer{d: d, f: f, name: f.Name(), quit: make(chan struct{}), fault: d.writeFault(),
		sums: [4]hash.Hash{md5.New(), sha1.New(), sha256.New(), sha512.New()}}
	w.more.L, w.end.L = &w.mu, &w.mu
	return w, nil
}

// Name is the temp file's path. Readers may open it while it grows: an open
// descriptor stays valid after Publish renames the file.
func (w *Writer) Name() string { return w.name }

// Size is how many bytes were written so far.
func (w *Writer) Size() int64 { return w.n }

// Write appends p to the file. The hashers read it from there.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("blobs: write after Finish or Abort")
	}
	var n int
	var err error
	if w.fault != nil {
		if allow, ferr := w.fault(w.n, len(p)); ferr != nil {
			n, err = w.f.Write(p[:allow])
			if err == nil {
				err = ferr
			}
		} else {
			n, err = w.f.Write(p)
		}
	} else {
		n, err = w.f.Write(p)
	}
	if n > 0 {
		w.n += int64(n)
		w.publish(false)
	}
	return n, err
}

// publish hands the bytes written so far to the hashers, starting them on
// the first call; end says that no more will come.
func (w *Writer) publish(end bool) {
	w.mu.Lock()
	w.avail, w.ended = w.n, end
	wake := w.idle > 0
	w.mu.Unlock()
	if !w.started {
		w.started = true
		w.wg.Add(len(hashGroups))
		for _, g := range hashGroups {
			go w.hash(g)
		}
		return
	}
	if wake || end {
		w.more.Broadcast()
	}
	if end {
		w.end.Broadcast()
	}
}

// hash runs one hashing goroutine: it reads the file from the start into
// the digests of group, behind the writer, until the writer has ended and
// it has read everything, or the writer aborts.
func (w *Writer) hash(group []int) {
	defer w.wg.Done()
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	buf := *bp
	var off int64
	for {
		w.mu.Lock()
		for !w.stop.Load() && !w.ended {
			if off == w.avail {
				w.idle++
				w.more.Wait()
				w.idle--
			} else if w.avail-off > hashLagMax {
				w.behind++
				w.end.Wait()
				w.behind--
			} else {
				break
			}
		}
		avail := w.avail
		w.mu.Unlock()
		if w.stop.Load() || off == avail {
			return
		}
		select {
		case w.d.hashSlots <- struct{}{}:
		case <-w.quit:
			return
		}
		n, err := w.f.ReadAt(buf[:min(int64(len(buf)), avail-off)], off)
		for _, i := range group {
			w.sums[i].Write(buf[:n])
		}
		<-w.d.hashSlots
		off += int64(n)
		if err != nil && off < avail {
			// The file holds fewer bytes than were written to it: the
			// digests would be wrong, so the blob must not be published.
			w.mu.Lock()
			if w.herr == nil {
				w.herr = fmt.Errorf("blobs: reading back the temp file: %w", err)
			}
			w.mu.Unlock()
			return
		}
		runtime.Gosched()
	}
}

// Finish waits for the hashers, makes the temp file durable (fsync) and
// closes it; the digests name the blob. The temp file stays until Publish or
// Abort. When the fsync or the close fails (a full volume can fail it: see
// IsDiskFull), the digests are still returned with the error: they are
// those of the bytes written, which readers of the file got.
func (w *Writer) Finish() (Digests, error) {
	if w.closed {
		return Digests{}, errors.New("blobs: writer already finished")
	}
	w.publish(true)
	w.wg.Wait()
	w.closed = true
	if w.herr != nil {
		w.f.Close()
		return Digests{}, w.herr
	}
	d := SumHashes(w.sums, w.n)
	if err := w.f.Sync(); err != nil {
		w.f.Close()
		return d, fmt.Errorf("blobs: fsync: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return d, fmt.Errorf("blobs: %w", err)
	}
	return d, nil
}

// Detach ends a writer whose file can take no more bytes (the volume is
// full, see IsDiskFull) while its body goes on elsewhere: it waits for the
// hashers to have read every byte written, removes the temp file and
// returns the running digests (md5, sha1, sha256, sha512) for the caller to
// feed the rest of the body to. Descriptors opened on the file stay
// readable. The writer is then aborted.
func (w *Writer) Detach() ([4]hash.Hash, error) {
	if w.closed {
		return [4]hash.Hash{}, errors.New("blobs: writer already finished")
	}
	w.publish(true)
	w.wg.Wait()
	herr := w.herr
	w.Abort()
	if herr != nil {
		return [4]hash.Hash{}, herr
	}
	return w.sums, nil
}

// take hands the temp file of a finished writer to the tier that places
// it: the writer no longer removes it.
func (w *Writer) take() (string, error) {
	if !w.closed || w.name == "" {
		return "", errors.New("blobs: publish of an unfinished or aborted writer")
	}
	name := w.name
	w.name = ""
	return name, nil
}

// Abort stops the hashers, waits for them to return and drops the temp
// file. It is safe to call after Finish or Publish (it then only removes
// what is left) and more than once.
func (w *Writer) Abort() {
	if !w.closed {
		w.closed = true
		w.stop.Store(true)
		close(w.quit)
		w.mu.Lock()
		w.more.Broadcast()
		w.end.Broadcast()
		w.mu.Unlock()
		w.wg.Wait()
		w.f.Close()
	}
	if w.name != "" {
		os.Remove(w.name)
		w.name = ""
	}
}

// NewHashes returns fresh running digests in the order of Detach's: md5,
// sha1, sha256, sha512.
func NewHashes() [4]hash.Hash {
	return [4]hash.Hash{md5.New(), sha1.New(), sha256.New(), sha512.New()}
}

// SumHashes returns the digests of running hashes (as Detach and NewHashes
// give them) over size bytes.
func SumHashes(sums [4]hash.Hash, size int64) Digests {
	return Digests{
		Size:   size,
		MD5:    hex.EncodeToString(sums[0].Sum(nil)),
		SHA1:   hex.EncodeToString(sums[1].Sum(nil)),
		SHA256: hex.EncodeToString(sums[2].Sum(nil)),
		SHA512: hex.EncodeToString(sums[3].Sum(nil)),
	}
}
