package proxy

import (
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// smallBlobs keeps the bytes of small cached files in memory, keyed by
// SHA-256. A hit on a small file then costs no open, read or close: at tens
// of thousands of requests a second those three syscalls are a fifth of the
// CPU. Blobs are content-addressed and never change, so a copy can never be
// stale; when the collector deletes a blob, its copy simply ages out.
type smallBlobs struct {
	maxFile int64 // files larger than this are always sent from disk
	budget  int64 // total bytes held

	mu    sync.Mutex
	lru   *simplelru.LRU[string, []byte]
	bytes int64
}

// newSmallBlobs returns nil (no memory cache) when budget or maxFile is 0.
// It keeps at most entries blobs (Options.Memory.SmallBlobs).
func newSmallBlobs(budget, maxFile int64, entries int) (*smallBlobs, error) {
	if budget <= 0 || maxFile <= 0 {
		return nil, nil
	}
	c := &smallBlobs{maxFile: min(maxFile, budget), budget: budget}
	// The count bound is only a backstop; the byte budget does the evicting.
	l, err := simplelru.NewLRU[string, []byte](entries, func(_ string, b []byte) { c.bytes -= int64(len(b)) })
	if err != nil {
		return nil, err
	}
	c.lru = l
	return c, nil
}

// fits reports whether a file of size is kept in memory.
func (c *smallBlobs) fits(size int64) bool { return c != nil && size <= c.maxFile }

// load returns the bytes of the blob at path, from memory or from disk. A
// file whose length is not size is an error (the index and the disk
// disagree), and is not kept.
func (c *smallBlobs) load(sha, path string, size int64) ([]byte, error) {
	c.mu.Lock()
	b, ok := c.lru.Get(sha)
	c.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != size {
		return nil, fmt.Errorf("blob %s has %d bytes, the index says %d", sha, len(b), size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lru.Contains(sha) {
		c.lru.Add(sha, b)
		c.bytes += int64(len(b))
		for c.bytes > c.budget {
			c.lru.RemoveOldest()
		}
	}
	return b, nil
}

// held is the bytes currently in memory, for metrics.
func (c *smallBlobs) held() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// count is the blobs currently in memory, for metrics.
func (c *smallBlobs) count() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// keep puts the verified bytes of a small blob read from the bucket in
// the memory cache, as load does for one read from disk.
func (c *smallBlobs) keep(sha string, b []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lru.Contains(sha) {
		c.lru.Add(sha, b)
		c.bytes += int64(len(b))
		for c.bytes > c.budget {
			c.lru.RemoveOldest()
		}
	}
}
