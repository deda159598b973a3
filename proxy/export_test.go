package proxy

import "registryd/store"

// Runs of the background jobs at the moment a test chooses; the daemon
// runs them on their timers (background.go).

// ExpireAuditOnce deletes the audit events older than audit.retention (0:
// none), until none is left, and returns how many it deleted.
func (s *Server) ExpireAuditOnce() (int, error) { return s.expireAudit(nil) }

// CollectOnce runs the collector until no entry waits for destruction (or
// an error).
func (s *Server) CollectOnce() (store.CollectResult, error) { return s.collect(nil, 0) }

// EvictOnce runs eviction once: when a mark is crossed, entries go until
// the blobs freed reach what it asks (or none is left).
func (s *Server) EvictOnce() (EvictResult, error) { return s.evict(nil) }
