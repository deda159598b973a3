// Package auth decides who is calling (PRIVATE-TOKEN, Bearer, Basic,
// Deploy-Token) and what they may do (access levels, scopes, licence and
// feature gates). The admin and proxy listeners both use it; it knows no HTTP
// library: listeners hand it the credentials they read.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"registryd/store"
)

// Plan is the licence tier registryd behaves as (license.plan): it gates
// what GitLab sells in its Premium and Ultimate tiers.
type Plan string

// The licence tiers, lowest first.
const (
	PlanFree     Plan = "free"
	PlanPremium  Plan = "premium"
	PlanUltimate Plan = "ultimate"
)

// AtLeast reports whether p is the tier min or a higher one. A plan that is
// none of the tiers is below them all.
func (p Plan) AtLeast(min Plan) bool { return p.rank() >= min.rank() }

func (p Plan) rank() int {
	switch p {
	case PlanFree:
		return 1
	case PlanPremium:
		return 2
	case PlanUltimate:
		return 3
	}
	return 0
}

// Options configure a Service. Zero fields take the defaults below, which
// are registryd's (config.Default).
type Options struct {
	// CacheTTL is how long a token or permission decision is cached
	// (auth.cache_ttl). Default 60s.
	CacheTTL time.Duration
	// CacheSize is how many decisions of each kind are cached
	// (auth.cache_size). Default 10000.
	CacheSize int
	// Plan is the licence tier (license.plan). Default PlanUltimate.
	Plan Plan
	// DisableVirtualRegistry switches the Maven virtual registry off
	// whatever the plan (features.virtual_registry false). Default false:
	// on from PlanPremium up.
	DisableVirtualRegistry bool
	// Now is the clock of token expiry; tests inject one. Default time.Now.
	Now func() time.Time
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.CacheTTL <= 0 {
		o.CacheTTL = 60 * time.Second
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 10000
	}
	if o.Plan == "" {
		o.Plan = PlanUltimate
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Kind says what sort of credential authenticated a principal.
type Kind uint8

// Principal kinds.
const (
	Anonymous Kind = iota
	PersonalToken
	DeployToken
)

// Principal is an authenticated caller.
type Principal struct {
	Kind   Kind
	User   store.User        // for PersonalToken
	Token  store.Token       // for PersonalToken
	Deploy store.DeployToken // for DeployToken
	// expires is when the credential stops being good (zero: never).
	expires time.Time
}

// Authenticated reports whether any credential was accepted.
func (p Principal) Authenticated() bool { return p.Kind != Anonymous }

// IsAdmin reports whether the caller is an instance administrator.
func (p Principal) IsAdmin() bool { return p.Kind == PersonalToken && p.User.Admin }

// UserID is the caller's user id, or 0 when not a user.
func (p Principal) UserID() int64 {
	if p.Kind == PersonalToken {
		return p.User.ID
	}
	return 0
}

// HasScope reports whether the credential carries any of scopes.
func (p Principal) HasScope(scopes ...string) bool {
	var have []string
	switch p.Kind {
	case PersonalToken:
		have = p.Token.Scopes
	case DeployToken:
		have = p.Deploy.Scopes
	}
	for _, s := range scopes {
		if slices.Contains(have, s) {
			return true
		}
	}
	return false
}

// Credentials are what a request presented, read by the listener.
type Credentials struct {
	PrivateToken string // PRIVATE-TOKEN header or private_token query parameter
	Bearer       string // Authorization: Bearer
	DeployToken  string // Deploy-Token header
	BasicUser    string // Authorization: Basic
	BasicPass    string
	HasBasic     bool
}

// Empty reports whether no credential was presented.
func (c Credentials) Empty() bool {
	return c.PrivateToken == "" && c.Bearer == "" && c.DeployToken == "" && !c.HasBasic
}

// ParseAuthorization fills Bearer or Basic from an Authorization header value.
func (c *Credentials) ParseAuthorization(h string) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok {
		return
	}
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, "bearer"):
		c.Bearer = rest
	case strings.EqualFold(scheme, "basic"):
		// Decoded on the stack and turned into one string: this runs on
		// every download request.
		var buf [512]byte
		if base64.StdEncoding.DecodedLen(len(rest)) > len(buf) {
			return
		}
		// Decode only reads its source: viewing the string's bytes avoids a copy.
		n, err := base64.StdEncoding.Decode(buf[:], unsafe.Slice(unsafe.StringData(rest), len(rest)))
		if err != nil {
			return
		}
		u, p, ok := strings.Cut(string(buf[:n]), ":")
		if !ok {
			return
		}
		c.BasicUser, c.BasicPass, c.HasBasic = u, p, true
	}
}

// ErrUnauthorized means credentials were presented but are not good: unknown,
// revoked, expired, or not of a kind the surface accepts.
var ErrUnauthorized = errors.New("unauthorized")

// Service authenticates and authorizes against the store, caching decisions
// briefly. Any change to users, tokens or memberships empties the caches.
type Service struct {
	st  *store.Store
	now func() time.Time
	// plan and virtualRegistry are the licence and feature gates
	// (Options.Plan, Options.DisableVirtualRegistry).
	plan            Plan
	virtualRegistry bool

	principals *expirable.LRU[principalKey, principalEntry]
	levels     *expirable.LRU[levelKey, levelEntry]
}

// principalKey identifies a credential by the hash of its secret, never the
// secret itself; a fixed-size key builds without allocating.
type principalKey struct {
	kind string // "pat", "deploy" or "basic"
	user string // the Basic username
	sum  [sha256.Size]byte
}

type principalEntry struct {
	gen uint64
	p   Principal
	err error
}

type levelKey struct {
	kind    byte // 'g' group level, 'p' project level, 'u' membership under a top-level group
	user    int64
	subject int64
}

type levelEntry struct {
	gen   uint64
	level int
}

// New returns a Service; zero Options fields take the defaults above.
func New(st *store.Store, o Options) *Service {
	o = o.withDefaults()
	return &Service{
		st: st, now: o.Now, plan: o.Plan, virtualRegistry: !o.DisableVirtualRegistry,
		principals: expirable.NewLRU[principalKey, principalEntry](o.CacheSize, nil, o.CacheTTL),
		levels:     expirable.NewLRU[levelKey, levelEntry](o.CacheSize, nil, o.CacheTTL),
	}
}

// Surface says which credentials an endpoint family accepts.
type Surface uint8

// Surfaces.
const (
	// API is the REST API: personal access tokens only; deploy tokens are refused.
	API Surface = iota
	// Download is the virtual registry download path: personal and deploy tokens.
	Download
)

// Authenticate returns the principal for c. No credentials is the anonymous
// principal and no error; bad credentials are ErrUnauthorized.
func (s *Service) Authenticate(c Credentials, surface Surface) (Principal, error) {
	if c.Empty() {
		return Principal{}, nil
	}
	var token, basicUser, kindHint string
	switch {
	case c.PrivateToken != "":
		token, kindHint = c.PrivateToken, "pat"
	case c.Bearer != "":
		token, kindHint = c.Bearer, "pat"
	case c.DeployToken != "":
		token, kindHint = c.DeployToken, "deploy"
	default:
		token, basicUser, kindHint = c.BasicPass, c.BasicUser, "basic"
	}
	if token == "" {
		return Principal{}, ErrUnauthorized
	}
	p, err := s.lookup(token, basicUser, kindHint)
	if err != nil {
		return Principal{}, err
	}
	if !p.expires.IsZero() && !s.now().Before(p.expires) {
		return Principal{}, ErrUnauthorized
	}
	if p.Kind == DeployToken && surface != Download {
		return Principal{}, ErrUnauthorized
	}
	return p, nil
}

func (s *Service) lookup(token, basicUser, kindHint string) (Principal, error) {
	// Sum256 only reads its input: hashing a view of the token's bytes avoids
	// copying a secret onto the heap.
	key := principalKey{kind: kindHint, user: basicUser, sum: sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))}
	sum := key.sum
	gen := s.st.AuthGeneration()
	if e, ok := s.principals.Get(key); ok && e.gen == gen {
		return e.p, e.err
	}
	p, err := s.resolve(sum[:], basicUser, kindHint)
	if err != nil && !errors.Is(err, ErrUnauthorized) {
		return p, err // a store failure is not cached
	}
	s.principals.Add(key, principalEntry{gen: gen, p: p, err: err})
	return p, err
}

func (s *Service) resolve(hash []byte, basicUser, kindHint string) (Principal, error) {
	now := s.now()
	if kindHint != "deploy" {
		t, u, err := s.st.TokenByHash(hash)
		switch {
		case err == nil:
			if !t.Active(now) || u.State != "active" {
				return Principal{}, ErrUnauthorized
			}
			if kindHint == "basic" && !strings.EqualFold(basicUser, u.Username) {
				return Principal{}, ErrUnauthorized
			}
			p := Principal{Kind: PersonalToken, User: u, Token: t}
			if t.ExpiresAt != nil {
				p.expires = *t.ExpiresAt
			}
			return p, nil
		case !errors.Is(err, store.ErrNotFound):
			return Principal{}, err
		}
	}
	if kindHint == "pat" {
		return Principal{}, ErrUnauthorized
	}
	d, err := s.st.DeployTokenByHash(hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Principal{}, ErrUnauthorized
	case err != nil:
		return Principal{}, err
	}
	if !d.Active(now) || (kindHint == "basic" && basicUser != d.Username) {
		return Principal{}, ErrUnauthorized
	}
	p := Principal{Kind: DeployToken, Deploy: d}
	if d.ExpiresAt != nil {
		p.expires = *d.ExpiresAt
	}
	return p, nil
}

func (s *Service) level(kind byte, user, subject int64, compute func() int) int {
	k := levelKey{kind, user, subject}
	gen := s.st.AuthGeneration()
	if e, ok := s.levels.Get(k); ok && e.gen == gen {
		return e.level
	}
	failures := s.st.ReadFailures()
	l := compute()
	// An answer computed while the index's database failed is "no access"
	// for this request only: remembered, it would lock the user out for
	// the cache's lifetime after the database is back.
	if s.st.ReadFailures() == failures {
		s.levels.Add(k, levelEntry{gen: gen, level: l})
	}
	return l
}

// GroupLevel is the caller's effective access level in a group.
func (s *Service) GroupLevel(p Principal, group int64) int {
	if p.Kind != PersonalToken {
		return store.NoAccess
	}
	if p.IsAdmin() {
		return store.Owner
	}
	return s.level('g', p.User.ID, group, func() int { return s.st.GroupAccessLevel(group, p.User.ID) })
}

// ProjectLevel is the caller's effective access level in a project.
func (s *Service) ProjectLevel(p Principal, project int64) int {
	if p.Kind != PersonalToken {
		return store.NoAccess
	}
	if p.IsAdmin() {
		return store.Owner
	}
	return s.level('p', p.User.ID, project, func() int { return s.st.ProjectAccessLevel(project, p.User.ID) })
}

// CanReadRegistries reports whether the caller may read the virtual
// registries of top-level group top: admins, guests and above of the group,
// members of any subgroup or project in it, and the group's deploy tokens with
// scope read_virtual_registry.
func (s *Service) CanReadRegistries(p Principal, top int64) bool {
	switch p.Kind {
	case DeployToken:
		return p.Deploy.GroupID == top && p.HasScope(store.ScopeReadVirtualRegistry)
	case PersonalToken:
		if s.GroupLevel(p, top) >= store.Guest {
			return true
		}
		return s.level('u', p.User.ID, top, func() int {
			if s.st.HasMembershipUnder(top, p.User.ID) {
				return store.Guest
			}
			return store.NoAccess
		}) >= store.Guest
	}
	return false
}

// CanManageRegistries reports whether the caller may create, change and
// delete virtual registries, upstreams and cache of top-level group top.
func (s *Service) CanManageRegistries(p Principal, top int64) bool {
	return s.GroupLevel(p, top) >= store.Maintainer
}

// CanSeeProject reports whether the project exists for the caller at all:
// public projects for everyone, internal ones for any signed-in user, private
// ones for members and admins.
func (s *Service) CanSeeProject(p Principal, pr store.Project) bool {
	switch {
	case pr.Visibility == store.Public:
		return true
	case pr.Visibility == store.Internal && p.Kind == PersonalToken:
		return true
	}
	return s.ProjectLevel(p, pr.ID) >= store.Guest
}

// VirtualRegistryEnabled reports whether the licence and the feature flag
// allow the virtual registry.
func (s *Service) VirtualRegistryEnabled() bool {
	return s.virtualRegistry && s.plan.AtLeast(PlanPremium)
}

// DependencyListEnabled reports whether the licence allows the dependency list.
func (s *Service) DependencyListEnabled() bool {
	return s.plan.AtLeast(PlanUltimate)
}

// Plan is the licence tier, for the gates the listeners keep themselves
// (audit events, the Enterprise flag of /metadata).
func (s *Service) Plan() Plan { return s.plan }

// NewTokenValue returns a fresh random token value with the given prefix
// ("rdpat-" for personal, "rddt-" for deploy tokens).
func NewTokenValue(prefix string) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic("auth: no randomness: " + err.Error())
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}
