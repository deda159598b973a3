package store

import (
	"crypto/subtle"
	"strconv"
	"strings"
	"time"

	"registryd/store/kv"
)

// defaultValidityHours is the default of both cache validity settings.
const defaultValidityHours = 24

// The checksum policies of an upstream: what a fill checks of the checksums
// the upstream offers. An upstream's ChecksumPolicy is one of them, or ""
// to follow the global default (config upstreams.checksum_policy).
const (
	// ChecksumVerify: a checksum the upstream offers (X-Checksum-* header,
	// Nexus "{SHA1{...}}" ETag) must match the bytes.
	ChecksumVerify = "verify"
	// ChecksumRequire: as verify, and without an offered checksum the
	// upstream's <file>.sha1 is fetched; a file whose checksum is missing or
	// wrong is refused.
	ChecksumRequire = "require"
	// ChecksumOff: offered checksums are not checked.
	ChecksumOff = "off"
)

// validChecksumPolicy reports whether p is a policy an upstream may carry:
// one of the three, or "" for the global default.
func validChecksumPolicy(p string) bool {
	switch p {
	case "", ChecksumVerify, ChecksumRequire, ChecksumOff:
		return true
	}
	return false
}

// maxNotFoundCacheMinutes bounds an upstream's negative-cache overrides
// (not_found_cache_minutes, metadata_not_found_cache_minutes): a week. A
// file published upstream must not stay invisible for longer.
const maxNotFoundCacheMinutes = 7 * 24 * 60

// Upstream is a remote Maven repository of a top-level group. Password is
// sealed at rest and only ever returned by this package to callers that fetch
// from the upstream.
type Upstream struct {
	ID                         int64     `json:"id"`
	GroupID                    int64     `json:"group_id"`
	URL                        string    `json:"url"`
	Name                       string    `json:"name"`
	Description                string    `json:"description"`
	CacheValidityHours         int       `json:"cache_validity_hours"`
	MetadataCacheValidityHours int       `json:"metadata_cache_validity_hours"`
	Username                   string    `json:"username"`
	Password                   string    `json:"-"`
	PasswordSealed             []byte    `json:"password_sealed,omitempty"`
	CreatedAt                  time.Time `json:"created_at"`
	UpdatedAt                  time.Time `json:"updated_at"`

	// ChecksumPolicy overrides the global checksum policy for this upstream
	// (one of the Checksum* policies); "" follows the global default.
	ChecksumPolicy string `json:"checksum_policy,omitempty"`

	// NotFoundCacheMinutes overrides, for this upstream, how long its 404 or
	// 410 for a file is remembered (config upstreams.not_found_ttl); 0
	// remembers nothing. nil follows the global setting.
	NotFoundCacheMinutes *int `json:"not_found_cache_minutes,omitempty"`
	// MetadataNotFoundCacheMinutes is NotFoundCacheMinutes for
	// maven-metadata.xml (config upstreams.metadata_not_found_ttl).
	MetadataNotFoundCacheMinutes *int `json:"metadata_not_found_cache_minutes,omitempty"`
}

// RegistryUpstream places an upstream at a position of a registry.
type RegistryUpstream struct {
	ID         int64 `json:"id"`
	RegistryID int64 `json:"registry_id"`
	UpstreamID int64 `json:"upstream_id"`
	Position   int   `json:"position"`
}

// PositionedUpstream is an upstream as a registry sees it.
type PositionedUpstream struct {
	Upstream
	Assoc RegistryUpstream
}

// NewUpstream is the input of CreateUpstream. URL is already normalised and
// checked against the network policy by the caller.
type NewUpstream struct {
	URL, Name, Description, Username, Password string
	// ChecksumPolicy is one of the Checksum* policies, or "" for the global default.
	ChecksumPolicy string
	// nil means the default of 24 hours.
	CacheValidityHours, MetadataCacheValidityHours *int
	// The negative-cache overrides, 0..maxNotFoundCacheMinutes; nil follows
	// the global config.
	NotFoundCacheMinutes, MetadataNotFoundCacheMinutes *int
}

// mavenCentral's artifacts never change, so its entries never need re-checking.
const mavenCentral = "https://repo1.maven.org/maven2"

func validUpstream(u Upstream) error {
	v := &ValidationError{}
	switch {
	case u.URL == "":
		v.Add("url", "can't be blank")
	case overLimit(u.URL, 255):
		v.Add("url", "is too long (maximum is 255 characters)")
	}
	validName(v, u.Name, 255)
	if overLimit(u.Description, 1024) {
		v.Add("description", "is too long (maximum is 1024 characters)")
	}
	if u.CacheValidityHours < 0 {
		v.Add("cache_validity_hours", "must be greater than or equal to 0")
	}
	if u.MetadataCacheValidityHours < 1 {
		v.Add("metadata_cache_validity_hours", "must be greater than 0")
	}
	if overLimit(u.Username, 510) {
		v.Add("username", "is too long (maximum is 510 characters)")
	}
	if overLimit(u.Password, 510) {
		v.Add("password", "is too long (maximum is 510 characters)")
	}
	// GitLab's model: each of username and password needs the other.
	switch {
	case u.Username != "" && u.Password == "":
		v.Add("password", "can't be blank")
	case u.Password != "" && u.Username == "":
		v.Add("username", "can't be blank")
	}
	if !validChecksumPolicy(u.ChecksumPolicy) {
		v.Add("checksum_policy", "is invalid")
	}
	validMinutes(v, "not_found_cache_minutes", u.NotFoundCacheMinutes)
	validMinutes(v, "metadata_not_found_cache_minutes", u.MetadataNotFoundCacheMinutes)
	return v.Err()
}

// validMinutes checks an optional negative-cache override.
func validMinutes(v *ValidationError, field string, m *int) {
	switch {
	case m == nil:
	case *m < 0:
		v.Add(field, "must be greater than or equal to 0")
	case *m > maxNotFoundCacheMinutes:
		v.Add(field, "must be less than or equal to "+strconv.Itoa(maxNotFoundCacheMinutes))
	}
}

func (s *Store) upstreamTx(tx kv.Tx, id int64) (Upstream, bool, error) {
	var u Upstream
	if !getJSON(tx.Bucket(bktUpstreams), itob(id), &u) {
		return u, false, nil
	}
	pw, err := s.sealer.open(u.PasswordSealed)
	u.Password = pw
	return u, true, err
}

func (s *Store) putUpstreamTx(tx kv.Tx, u Upstream) error {
	u.PasswordSealed = s.sealer.seal(u.Password)
	return putJSON(tx.Bucket(bktUpstreams), itob(u.ID), u)
}

// duplicateTx refuses a second upstream of the group with the same url and
// credentials: associate the existing one instead. The same url with the
// other scheme (http for https and back) is the same url, as in GitLab:
// urls are stored normalised (lower-case scheme and host, no default port,
// no trailing slash or .git), so the variant is the scheme swapped.
func (s *Store) duplicateTx(tx kv.Tx, u Upstream) error {
	variant := schemeVariant(u.URL)
	for _, id := range childIDs(tx.Bucket(bktGroupUpstreams), u.GroupID) {
		if id == u.ID {
			continue
		}
		o, ok, err := s.upstreamTx(tx, id)
		if err != nil {
			return err
		}
		if ok && (o.URL == u.URL || o.URL == variant) && o.Username == u.Username &&
			subtle.ConstantTimeCompare([]byte(o.Password), []byte(u.Password)) == 1 {
			return invalid("group", "already has a remote upstream with the same url and credentials")
		}
	}
	return nil
}

// schemeVariant is url with http and https swapped, or "" for any other
// scheme (GitLab's Upstream#protocol_variant_url).
func schemeVariant(url string) string {
	if rest, ok := strings.CutPrefix(url, "https:"); ok {
		return "http:" + rest
	}
	if rest, ok := strings.CutPrefix(url, "http:"); ok {
		return "https:" + rest
	}
	return ""
}

// CreateUpstream adds an upstream to the registry's group and appends it to
// the registry's ordered list.
func (s *Store) CreateUpstream(registry int64, n NewUpstream) (PositionedUpstream, error) {
	now := s.clock()
	u := Upstream{URL: n.URL, Name: n.Name, Description: n.Description, Username: n.Username, Password: n.Password,
		ChecksumPolicy: n.ChecksumPolicy, CacheValidityHours: defaultValidityHours, MetadataCacheValidityHours: defaultValidityHours,
		NotFoundCacheMinutes: clonePtr(n.NotFoundCacheMinutes), MetadataNotFoundCacheMinutes: clonePtr(n.MetadataNotFoundCacheMinutes),
		CreatedAt: now, UpdatedAt: now}
	if n.CacheValidityHours != nil {
		u.CacheValidityHours = *n.CacheValidityHours
	}
	if n.MetadataCacheValidityHours != nil {
		u.MetadataCacheValidityHours = *n.MetadataCacheValidityHours
	}
	if strings.HasPrefix(u.URL, mavenCentral) {
		u.CacheValidityHours = 0
	}
	if err := validUpstream(u); err != nil {
		return PositionedUpstream{}, err
	}
	var out PositionedUpstream
	err := s.update(false, true, func(tx kv.Tx) error {
		// duplicateTx skips u.ID: not an id drawn by an earlier run (kv may
		// run the function again).
		u.ID = 0
		r, ok := registryTx(tx, registry)
		if !ok {
			return notFound("Registry")
		}
		u.GroupID = r.GroupID
		if len(assocsOfRegistryTx(tx, registry)) >= MaxUpstreamsPerRegistry {
			return invalid("registry_upstreams.position", "must be less than or equal to 20")
		}
		if err := s.duplicateTx(tx, u); err != nil {
			return err
		}
		id, err := nextID(tx.Bucket(bktUpstreams))
		if err != nil {
			return err
		}
		u.ID = id
		if err := s.putUpstreamTx(tx, u); err != nil {
			return err
		}
		if err := tx.Bucket(bktGroupUpstreams).Put(pair(u.GroupID, id), emptyValue); err != nil {
			return err
		}
		a, err := appendAssocTx(tx, registry, id)
		out = PositionedUpstream{Upstream: u, Assoc: a}
		return err
	})
	return out, err
}

// Upstream returns an upstream by id, password included.
func (s *Store) Upstream(id int64) (Upstream, error) {
	var u Upstream
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		var err error
		if u, ok, err = s.upstreamTx(tx, id); err != nil {
			return err
		} else if !ok {
			return notFound("Upstream")
		}
		return nil
	})
	return u, err
}

// UpstreamPatch lists the fields an update changes; nil leaves a field alone.
type UpstreamPatch struct {
	URL, Name, Description, Username, Password     *string
	CacheValidityHours, MetadataCacheValidityHours *int
	// ChecksumPolicy sets the override; a pointer to "" clears it.
	ChecksumPolicy *string
	// The negative-cache overrides: nil leaves one alone, a pointer to nil
	// clears it (the global config applies again), a pointer to a value
	// sets it.
	NotFoundCacheMinutes, MetadataNotFoundCacheMinutes **int
}

// UpdateUpstream changes an upstream. Changing the url without new
// credentials clears the stored ones, so old credentials never reach a new host.
func (s *Store) UpdateUpstream(id int64, p UpstreamPatch) (Upstream, error) {
	defer s.forget.bump(id)
	var u Upstream
	err := s.update(false, true, func(tx kv.Tx) error {
		var ok bool
		var err error
		if u, ok, err = s.upstreamTx(tx, id); err != nil {
			return err
		} else if !ok {
			return notFound("Upstream")
		}
		urlChanged := p.URL != nil && *p.URL != u.URL
		credsChanged := urlChanged
		set := func(dst *string, src *string) {
			if src != nil {
				*dst = *src
			}
		}
		set(&u.URL, p.URL)
		set(&u.Name, p.Name)
		set(&u.Description, p.Description)
		set(&u.ChecksumPolicy, p.ChecksumPolicy)
		if urlChanged && p.Username == nil && p.Password == nil {
			u.Username, u.Password = "", ""
		}
		if p.Username != nil || p.Password != nil {
			credsChanged = true
			set(&u.Username, p.Username)
			set(&u.Password, p.Password)
		}
		if p.CacheValidityHours != nil {
			u.CacheValidityHours = *p.CacheValidityHours
		}
		if p.MetadataCacheValidityHours != nil {
			u.MetadataCacheValidityHours = *p.MetadataCacheValidityHours
		}
		if p.NotFoundCacheMinutes != nil {
			u.NotFoundCacheMinutes = clonePtr(*p.NotFoundCacheMinutes)
		}
		if p.MetadataNotFoundCacheMinutes != nil {
			u.MetadataNotFoundCacheMinutes = clonePtr(*p.MetadataNotFoundCacheMinutes)
		}
		if err := validUpstream(u); err != nil {
			return err
		}
		if credsChanged {
			if err := s.duplicateTx(tx, u); err != nil {
				return err
			}
		}
		u.UpdatedAt = s.clock()
		return s.putUpstreamTx(tx, u)
	})
	return u, err
}

// clonePtr copies *p, so a stored upstream shares no memory with its caller.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// DeleteUpstream removes an upstream, closes the gaps it leaves in every
// registry's order, and marks its cache entries for destruction.
func (s *Store) DeleteUpstream(id int64) error {
	defer s.forget.bump(id)
	return s.update(false, true, func(tx kv.Tx) error {
		if tx.Bucket(bktUpstreams).Get(itob(id)) == nil {
			return notFound("Upstream")
		}
		return deleteUpstreamTx(tx, id, s.clock())
	})
}

func deleteUpstreamTx(tx kv.Tx, id int64, now time.Time) error {
	var u Upstream
	if !getJSON(tx.Bucket(bktUpstreams), itob(id), &u) {
		return nil
	}
	for _, aid := range childIDs(tx.Bucket(bktUpAssocs), id) {
		a, ok := assocTx(tx, aid)
		if !ok {
			continue
		}
		if err := deleteAssocTx(tx, a); err != nil {
			return err
		}
	}
	if _, err := markUpstreamPendingTx(tx, id, now); err != nil {
		return err
	}
	if err := deleteUpstreamRulesTx(tx, id); err != nil {
		return err
	}
	if err := tx.Bucket(bktGroupUpstreams).Delete(pair(u.GroupID, id)); err != nil {
		return err
	}
	return tx.Bucket(bktUpstreams).Delete(itob(id))
}

// GroupUpstreams lists a group's upstreams by id, optionally only those whose
// name contains nameFilter (case-insensitive), one page at a time. It returns
// the page and the total count.
func (s *Store) GroupUpstreams(group int64, nameFilter string, offset, limit int) ([]Upstream, int, error) {
	var out []Upstream
	total := 0
	needle := strings.ToLower(nameFilter)
	err := s.db.View(func(tx kv.Tx) error {
		if _, ok := groupTx(tx, group); !ok {
			return notFound("Group")
		}
		for _, id := range childIDs(tx.Bucket(bktGroupUpstreams), group) {
			var u Upstream
			if !getJSON(tx.Bucket(bktUpstreams), itob(id), &u) {
				continue
			}
			if needle != "" && !strings.Contains(strings.ToLower(u.Name), needle) {
				continue
			}
			if total >= offset && len(out) < limit {
				out = append(out, u)
			}
			total++
		}
		return nil
	})
	return out, total, err
}

// RegistryUpstreams lists a registry's upstreams in position order, passwords included.
func (s *Store) RegistryUpstreams(registry int64) ([]PositionedUpstream, error) {
	var out []PositionedUpstream
	err := s.db.View(func(tx kv.Tx) error {
		if _, ok := registryTx(tx, registry); !ok {
			return notFound("Registry")
		}
		for _, a := range assocsOfRegistryTx(tx, registry) {
			u, ok, err := s.upstreamTx(tx, a.UpstreamID)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, PositionedUpstream{Upstream: u, Assoc: a})
			}
		}
		return nil
	})
	return out, err
}

// UpstreamAssociations lists the registries an upstream belongs to, by association id.
func (s *Store) UpstreamAssociations(upstream int64) ([]RegistryUpstream, error) {
	var out []RegistryUpstream
	err := s.db.View(func(tx kv.Tx) error {
		if tx.Bucket(bktUpstreams).Get(itob(upstream)) == nil {
			return notFound("Upstream")
		}
		for _, id := range childIDs(tx.Bucket(bktUpAssocs), upstream) {
			if a, ok := assocTx(tx, id); ok {
				out = append(out, a)
			}
		}
		return nil
	})
	return out, err
}
