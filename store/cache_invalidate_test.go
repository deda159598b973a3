package store

import (
	"errors"
	"testing"
	"time"
)

func TestInvalidateCacheEntry(t *testing.T) {
	s, up := cacheFixture(t, "/a/1/a-1.jar", "/a/1/a-1.pom")
	before := ok(s.CacheEntry(up, "/a/1/a-1.jar"))(t)
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: up, Rel: "/a/1/a-1.jar", Count: 2, Last: before.CreatedAt}}))
	before = ok(s.CacheEntry(up, "/a/1/a-1.jar"))(t)
	if before.Invalidated {
		t.Fatal("a new entry is invalidated")
	}

	gen := s.CacheGeneration()
	got := ok(s.InvalidateCacheEntry(up, "/a/1/a-1.jar"))(t)
	if s.CacheGeneration() == gen {
		t.Fatal("invalidating did not move the cache generation: the proxy would keep serving its cached view")
	}
	stored := ok(s.CacheEntry(up, "/a/1/a-1.jar"))(t)
	for _, e := range []CacheEntry{got, stored} {
		if !e.Invalidated {
			t.Fatalf("entry not invalidated: %+v", e)
		}
		// Nothing else changes: not the times, the counter or the blob.
		e.Invalidated = false
		if e.CreatedAt != before.CreatedAt || e.UpdatedAt != before.UpdatedAt || e.CheckedAt != before.CheckedAt ||
			e.DownloadsCount != before.DownloadsCount || e.SHA256 != before.SHA256 || e.Size != before.Size {
			t.Fatalf("invalidating changed more than the flag:\n got %+v\nwant %+v", e, before)
		}
	}
	if other := ok(s.CacheEntry(up, "/a/1/a-1.pom"))(t); other.Invalidated {
		t.Fatal("the sibling entry was invalidated too")
	}
	// Twice is fine and still bumps.
	gen = s.CacheGeneration()
	ok(s.InvalidateCacheEntry(up, "/a/1/a-1.jar"))(t)
	if s.CacheGeneration() == gen {
		t.Fatal("a second invalidation did not move the generation")
	}
	// Listed like any entry, flag included.
	list, total := ok2(s.ListCacheEntries(up, "", 0, 10))(t)
	if total != 2 || list[1].RelativePath != "/a/1/a-1.jar" || !list[1].Invalidated || list[0].Invalidated {
		t.Fatalf("list = %+v", list)
	}

	t.Run("absent", func(t *testing.T) {
		gen := s.CacheGeneration()
		for _, tc := range []struct {
			up  int64
			rel string
		}{{up, "/nope.jar"}, {999, "/a/1/a-1.jar"}} {
			_, err := s.InvalidateCacheEntry(tc.up, tc.rel)
			var nf *NotFoundError
			if !errors.As(err, &nf) || nf.Resource != "Cache entry" || !errors.Is(err, ErrNotFound) {
				t.Fatalf("InvalidateCacheEntry(%d, %q) = %v", tc.up, tc.rel, err)
			}
		}
		if s.CacheGeneration() != gen {
			t.Fatal("a failed invalidation moved the generation")
		}
	})
	t.Run("a pending entry is absent", func(t *testing.T) {
		noErr(t, s.DeleteCacheEntry(up, "/a/1/a-1.pom"))
		if _, err := s.InvalidateCacheEntry(up, "/a/1/a-1.pom"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestInvalidatedClearedByTouchAndFill(t *testing.T) {
	t.Run("touch", func(t *testing.T) {
		s, up := cacheFixture(t, "/a/1/a-1.jar")
		ok(s.InvalidateCacheEntry(up, "/a/1/a-1.jar"))(t)
		gen := s.CacheGeneration()
		checked := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		noErr(t, s.TouchCacheEntry(up, "/a/1/a-1.jar", checked))
		e := ok(s.CacheEntry(up, "/a/1/a-1.jar"))(t)
		if e.Invalidated || !e.CheckedAt.Equal(checked) || s.CacheGeneration() == gen {
			t.Fatalf("after touch: %+v (generation moved: %v)", e, s.CacheGeneration() != gen)
		}
	})
	t.Run("fill", func(t *testing.T) {
		s, up := cacheFixture(t, "/a/1/a-1.jar")
		old := ok(s.InvalidateCacheEntry(up, "/a/1/a-1.jar"))(t)
		// A fill that copies the old record (flag included) still clears it.
		next := old
		next.SHA256, next.Size, next.DownloadsCount = "bb", 2, 0
		e := ok(s.PutCacheEntry(next))(t)
		stored := ok(s.CacheEntry(up, "/a/1/a-1.jar"))(t)
		if e.Invalidated || stored.Invalidated || stored.SHA256 != "bb" {
			t.Fatalf("after a new fill: %+v", stored)
		}
	})
	t.Run("downloads keep it", func(t *testing.T) {
		s, up := cacheFixture(t, "/a/1/a-1.jar")
		ok(s.InvalidateCacheEntry(up, "/a/1/a-1.jar"))(t)
		noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: up, Rel: "/a/1/a-1.jar", Count: 1, Last: time.Now()}}))
		if e := ok(s.CacheEntry(up, "/a/1/a-1.jar"))(t); !e.Invalidated || e.DownloadsCount != 1 {
			t.Fatalf("a counted download revived the entry: %+v", e)
		}
	})
}

func TestInvalidateUpstreamCache(t *testing.T) {
	s, upID := cacheFixture(t, "/a/1/a-1.jar", "/a/1/a-1.pom", "/b/2/b-2.jar")
	g := ok(s.Group(ok(s.Upstream(upID))(t).GroupID))(t)
	r := ok(s.CreateRegistry(g.ID, "second", ""))(t)
	other := up(t, s, r.ID, "https://other.example/m2").ID
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: other, RelativePath: "/a/1/a-1.jar", Size: 1, SHA256: "aa"}))(t)
	noErr(t, s.DeleteCacheEntry(upID, "/b/2/b-2.jar")) // pending: not counted

	ok(s.InvalidateCacheEntry(upID, "/a/1/a-1.pom"))(t)
	gen := s.CacheGeneration()
	n := ok(s.InvalidateUpstreamCache(upID))(t)
	if n != 2 {
		t.Fatalf("count = %d, want 2 (the live entries, an already invalidated one included)", n)
	}
	if s.CacheGeneration() == gen {
		t.Fatal("invalidating an upstream did not move the cache generation")
	}
	for _, rel := range []string{"/a/1/a-1.jar", "/a/1/a-1.pom"} {
		if e := ok(s.CacheEntry(upID, rel))(t); !e.Invalidated {
			t.Fatalf("%s not invalidated", rel)
		}
	}
	if e := ok(s.CacheEntry(other, "/a/1/a-1.jar"))(t); e.Invalidated {
		t.Fatal("another upstream's entry was invalidated")
	}
	if _, total := ok2(s.ListCacheEntries(upID, "", 0, 10))(t); total != 2 {
		t.Fatalf("entries were removed: %d left", total)
	}

	t.Run("empty upstream", func(t *testing.T) {
		empty := up(t, s, r.ID, "https://empty.example/m2").ID
		if n := ok(s.InvalidateUpstreamCache(empty))(t); n != 0 {
			t.Fatalf("count = %d", n)
		}
	})
	t.Run("unknown upstream", func(t *testing.T) {
		gen := s.CacheGeneration()
		_, err := s.InvalidateUpstreamCache(999)
		var nf *NotFoundError
		if !errors.As(err, &nf) || nf.Resource != "Upstream" {
			t.Fatalf("err = %v", err)
		}
		if s.CacheGeneration() != gen {
			t.Fatal("a failed invalidation moved the generation")
		}
	})
}
