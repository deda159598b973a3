package store

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"
)

// Bucket names. Every bucket registryd uses is listed here, created on open,
// and nowhere else named by string.
var (
	bktMeta = []byte("meta")

	bktUsers         = []byte("users")          // id -> User
	bktUsersByName   = []byte("users_by_name")  // lower(username) -> id
	bktUsersByEmail  = []byte("users_by_email") // lower(email) -> id
	bktTokens        = []byte("tokens")         // id -> Token
	bktTokensByHash  = []byte("tokens_by_hash") // sha256(token) -> id
	bktTokensByUser  = []byte("tokens_by_user") // user id + token id -> nil
	bktDeployTokens  = []byte("deploy_tokens")  // id -> DeployToken
	bktDeployByHash  = []byte("deploy_by_hash") // sha256(token) -> id
	bktDeployByGroup = []byte("deploy_by_group")

	bktGroups        = []byte("groups")         // id -> Group
	bktGroupsByPath  = []byte("groups_by_path") // lower(full path) -> id
	bktGroupChildren = []byte("group_children") // parent id + child id -> nil
	bktProjects      = []byte("projects")       // id -> Project
	bktProjectsPath  = []byte("projects_by_path")
	bktGroupProjects = []byte("group_projects") // group id + project id -> nil

	bktGroupMembers   = []byte("group_members")   // group id + user id -> Member
	bktProjectMembers = []byte("project_members") // project id + user id -> Member
	bktUserGroups     = []byte("user_groups")     // user id + group id -> nil
	bktUserProjects   = []byte("user_projects")   // user id + project id -> nil

	bktRegistries     = []byte("registries")         // id -> Registry
	bktGroupRegs      = []byte("group_registries")   // group id + registry id -> nil
	bktUpstreams      = []byte("upstreams")          // id -> Upstream
	bktGroupUpstreams = []byte("group_upstreams")    // group id + upstream id -> nil
	bktAssocs         = []byte("registry_upstreams") // id -> RegistryUpstream
	bktRegAssocs      = []byte("registry_assocs")    // registry id + assoc id -> nil
	bktUpAssocs       = []byte("upstream_assocs")    // upstream id + assoc id -> nil
	// Allow/deny rules: one upstream's rules are one key range, in id order.
	bktUpstreamRules = []byte("upstream_rules")    // upstream id + rule id -> UpstreamRule
	bktRuleUpstream  = []byte("upstream_rule_ids") // rule id -> upstream id; sequence: the last rule id

	bktCacheEntries = []byte("cache_entries") // upstream id + relative path -> CacheEntry
	bktCachePending = []byte("cache_pending") // pending seq -> pendingEntry (marked for destruction)
	bktCachePurges  = []byte("cache_purges")  // upstream id -> purgeMark (a purge in progress); sequence: the last epoch
	bktBlobRefs     = []byte("blob_refs")     // sha256 hex -> reference count (uint64)
	// Live entries newest first: upstream id + ^created_at ms + relative path -> nil.
	// Listing pages and substring searches walk these keys without decoding a record.
	bktCacheByTime = []byte("cache_by_time")

	// Dependency lists: one per project, replaced whole by an SBOM upload.
	// Keys and values as of depLayoutChunks (see dependencies.go, which
	// also still reads the JSON layout of schema version 1):
	bktDependencies = []byte("dependencies")           // project id + chunk number -> binary chunk of entries
	bktDepsByPM     = []byte("dependencies_by_pm")     // project id + package manager + 0 + run number -> position deltas
	bktDepLists     = []byte("dependency_lists")       // project id -> storedDepList (counts, layout)
	bktVulns        = []byte("vulnerabilities")        // id -> Vulnerability
	bktVulnsByKey   = []byte("vulnerabilities_by_key") // project id + external id (or alias) -> vulnerability id
	// Lists of depLayoutPackages by package (dependencies_index.go):
	// 'E' + ecosystem + 0 + name + 0 + project id, or 'B' + bucket + project id -> positions.
	bktDepsByPkg = []byte("dependencies_by_package")

	// The advisory database (advisories.go): records by id, by package (with
	// what matching needs) and by source (for a full import's sweep).
	bktAdvisories      = []byte("advisories")        // advisory id -> storedAdvisory
	bktAdvisoryPkgs    = []byte("advisory_packages") // ecosystem + 0 + name + 0 + advisory id -> pkgAdvisory
	bktAdvisorySources = []byte("advisory_sources")  // source + 0 + advisory id -> digest
	bktAdvisoryImports = []byte("advisory_imports")  // source -> AdvisoryImportResult of its last import

	// Activity events. Index values are the event's fixed header (see
	// events.go) so that filters are evaluated without decoding records.
	bktEvents             = []byte("events")                // id -> header + Event
	bktEventsByProject    = []byte("events_by_project")     // project id + event id -> header
	bktEventsByAuthor     = []byte("events_by_author")      // author id + event id -> header
	bktEventsByProjectAct = []byte("events_by_project_act") // project id + action + event id -> header
	bktEventsByAuthorAct  = []byte("events_by_author_act")  // author id + action + event id -> header
	bktEventCounts        = []byte("event_counts")          // see eventCountKey -> count (uint64)

	// Audit events (audit.go): records kept forever, and indexes ordered by
	// created_at then id whose values are the author id.
	bktAudit         = []byte("audit_events")    // id -> binary record
	bktAuditByTime   = []byte("audit_by_time")   // created ms + id -> author id
	bktAuditByType   = []byte("audit_by_type")   // entity type code + created ms + id -> author id
	bktAuditByEntity = []byte("audit_by_entity") // entity type code + entity id + created ms + id -> author id
	bktAuditCounts   = []byte("audit_counts")    // see auditCountKeys -> count (uint64)

	// Cleanup policies (cleanup_policies.go), with the state of a run in
	// progress: one per top-level group.
	bktCleanupPolicies = []byte("cleanup_policies") // group id -> CleanupPolicy

	// Live entries least recently used first, for eviction (cache_use.go):
	// last use ms (downloaded_at, else created_at) + upstream id + relative
	// path -> nil.
	bktCacheByUse = []byte("cache_by_use")

	// Key counts of the counted buckets (counts.go), kept in the
	// transactions that add and remove their keys:
	// bucket name + 0 + shard -> count (int64).
	bktCounts = []byte("counts")

	// Traffic history (traffic.go): what each node counted per interval,
	// and per hour; kept TrafficPointsKept and TrafficHoursKept.
	bktTrafficPoints = []byte("traffic_points") // end of the interval ms + node -> counts of each series
	bktTrafficHours  = []byte("traffic_hours")  // start of the hour ms + node -> counts of each series
)

var allBuckets = [][]byte{
	bktMeta,
	bktUsers, bktUsersByName, bktUsersByEmail, bktTokens, bktTokensByHash, bktTokensByUser,
	bktDeployTokens, bktDeployByHash, bktDeployByGroup,
	bktGroups, bktGroupsByPath, bktGroupChildren, bktProjects, bktProjectsPath, bktGroupProjects,
	bktGroupMembers, bktProjectMembers, bktUserGroups, bktUserProjects,
	bktRegistries, bktGroupRegs, bktUpstreams, bktGroupUpstreams, bktAssocs, bktRegAssocs, bktUpAssocs,
	bktUpstreamRules, bktRuleUpstream,
	bktCacheEntries, bktCachePending, bktCachePurges, bktBlobRefs, bktCacheByTime,
	bktDependencies, bktDepsByPM, bktDepLists, bktVulns, bktVulnsByKey, bktDepsByPkg,
	bktAdvisories, bktAdvisoryPkgs, bktAdvisorySources, bktAdvisoryImports,
	bktEvents, bktEventsByProject, bktEventsByAuthor, bktEventsByProjectAct, bktEventsByAuthorAct, bktEventCounts,
	bktAudit, bktAuditByTime, bktAuditByType, bktAuditByEntity, bktAuditCounts,
	bktCleanupPolicies,
	bktCacheByUse,
	bktCounts,
	bktTrafficPoints, bktTrafficHours,
}

// appendMostly are the buckets whose keys mostly grow (ids, times, a
// project's chunk numbers): an engine with pages fills their pages rather
// than splitting them in half (boltkv.Options.AppendMostly).
var appendMostly = [][]byte{
	bktDependencies, bktDepsByPM, // a list's chunks and runs, in position order
	bktEvents,                                // event ids
	bktAudit, bktAuditByTime, bktAuditByType, // audit ids, then creation times
	bktTrafficPoints, bktTrafficHours, // times
}

// AppendMostly names the buckets whose keys mostly arrive in ascending
// order (ids, times, a project's chunk numbers), for an engine with pages:
// whoever opens bbolt for the store passes them as
// boltkv.Options.AppendMostly (cmd, internal/boltstore), so that their
// pages are filled rather than split in half. A fresh copy each call.
func AppendMostly() [][]byte {
	out := make([][]byte, len(appendMostly))
	for i, b := range appendMostly {
		out[i] = slices.Clone(b)
	}
	return out
}

// Keys in the meta bucket.
var (
	metaSchemaVersion = []byte("schema_version")
	metaInitialized   = []byte("initialized")
	metaKeyCheck      = []byte("key_check") // a known value sealed with the secret key
	// cache_by_use is complete once this is set; until then metaUseNext is
	// the cache_entries key its build resumes at (cache_use.go).
	metaUseBuilt = []byte("cache_by_use_built")
	metaUseNext  = []byte("cache_by_use_next")
	// metaAdvisoryGen moves with every import batch that changed an
	// advisory (advisories_match.go, advisoryFilter).
	metaAdvisoryGen = []byte("advisory_generation")
)

// schemaVersion is written on every open; an older registryd refuses a
// database of a newer version. 2: dependency lists are stored in binary
// chunks (dependencies.go, depLayoutChunks); lists written by version 1 are
// still read and are rewritten by the project's next upload. 3: purges are
// marks carried out in batches (cache_purge.go); an older registryd would
// serve the entries of a purge in progress. 4: upstreams have allow/deny
// rules (rules.go) and registries a metadata merge switch; an older
// registryd would serve what the rules refuse. 5: live entries are indexed by
// last use (cache_use.go); an older registryd would write entries eviction
// never finds. 6: dependency lists say each entry's advisory package and
// are indexed by package, and an advisory database is kept
// (depLayoutPackages, advisories.go); an older registryd cannot read the
// new chunks. 7: the keys of the counted buckets are counted in bucket
// counts (counts.go), in the transactions that add and remove them; the
// counts of an older database are taken on open; an older registryd would
// change the buckets without their counts.
const schemaVersion = 7

// countsSchema is the first schema version whose writers keep the key
// counts (counts.go).
const countsSchema = 7

// itob encodes an id big-endian so that bbolt's byte order is numeric order.
func itob(id int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(id))
	return b
}

func btoi(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// pair is the 16-byte key of a two-id index (parent id, child id).
func pair(a, b int64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(a))
	binary.BigEndian.PutUint64(k[8:], uint64(b))
	return k
}

// cacheKey is upstream id (big-endian) followed by the relative path, so all
// entries of one upstream are one contiguous range.
func cacheKey(upstreamID int64, rel string) []byte {
	k := make([]byte, 8+len(rel))
	binary.BigEndian.PutUint64(k, uint64(upstreamID))
	copy(k[8:], rel)
	return k
}

// cacheTimeKey orders an upstream's entries newest first (the creation time in
// milliseconds, bit-inverted), then by path.
func cacheTimeKey(upstreamID int64, created time.Time, rel string) []byte {
	k := make([]byte, 16+len(rel))
	binary.BigEndian.PutUint64(k, uint64(upstreamID))
	binary.BigEndian.PutUint64(k[8:], ^uint64(created.UnixMilli()))
	copy(k[16:], rel)
	return k
}

// cacheUseKey orders live entries least recently used first: the last use
// in milliseconds (downloaded_at, else created_at), then upstream id and path.
func cacheUseKey(e *CacheEntry) []byte {
	use := e.CreatedAt
	if e.DownloadedAt != nil {
		use = *e.DownloadedAt
	}
	k := make([]byte, 16+len(e.RelativePath))
	binary.BigEndian.PutUint64(k, uint64(max(0, use.UnixMilli())))
	binary.BigEndian.PutUint64(k[8:], uint64(e.UpstreamID))
	copy(k[16:], e.RelativePath)
	return k
}

func lower(s string) []byte { return []byte(strings.ToLower(s)) }
