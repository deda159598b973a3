package store

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"time"

	"registryd/store/kv"
)

// Personal access token scopes.
const (
	ScopeAPI                 = "api"
	ScopeReadAPI             = "read_api"
	ScopeReadUser            = "read_user"
	ScopeReadVirtualRegistry = "read_virtual_registry"
)

// personalScopes are the scopes a personal access token may carry.
var personalScopes = []string{ScopeAPI, ScopeReadAPI, ScopeReadUser, ScopeReadVirtualRegistry}

// deployScopes are the scopes a group deploy token may carry.
var deployScopes = []string{ScopeReadVirtualRegistry}

// Token is a personal access token. Only the SHA-256 of its value is stored.
type Token struct {
	ID        int64      `json:"id"`
	UserID    int64      `json:"user_id"`
	Name      string     `json:"name"`
	Scopes    []string   `json:"scopes"`
	Hash      []byte     `json:"hash"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // a date: the token is good through the end of the day before
	Revoked   bool       `json:"revoked"`
	CreatedAt time.Time  `json:"created_at"`
}

// Active reports whether the token may authenticate at now.
func (t Token) Active(now time.Time) bool { return !t.Revoked && !expired(t.ExpiresAt, now) }

func expired(at *time.Time, now time.Time) bool { return at != nil && !now.Before(*at) }

// hashToken is the stored form of a token value.
func hashToken(plain string) []byte {
	h := sha256.Sum256([]byte(plain))
	return h[:]
}

// NewToken is the input of CreateToken. Plain is the token value; only its hash is kept.
type NewToken struct {
	UserID    int64
	Name      string
	Scopes    []string
	ExpiresAt *time.Time
	Plain     string
}

func validScopes(v *ValidationError, scopes, allowed []string) {
	if len(scopes) == 0 {
		v.Add("scopes", "can't be blank")
	}
	for _, sc := range scopes {
		if !slices.Contains(allowed, sc) {
			v.Add("scopes", "can only contain available scopes")
			return
		}
	}
}

func validTokenName(v *ValidationError, name string) {
	switch {
	case name == "":
		v.Add("name", "can't be blank")
	case overLimit(name, 255):
		v.Add("name", "is too long (maximum is 255 characters)")
	}
}

// CreateToken stores a personal access token of an existing user.
func (s *Store) CreateToken(n NewToken) (Token, error) {
	v := &ValidationError{}
	validTokenName(v, n.Name)
	validScopes(v, n.Scopes, personalScopes)
	if n.ExpiresAt != nil && !n.ExpiresAt.After(s.clock()) {
		v.Add("expires_at", "must be in the future")
	}
	if err := v.Err(); err != nil {
		return Token{}, err
	}
	t := Token{UserID: n.UserID, Name: n.Name, Scopes: slices.Compact(slices.Sorted(slices.Values(n.Scopes))),
		Hash: hashToken(n.Plain), ExpiresAt: n.ExpiresAt, CreatedAt: s.clock()}
	err := s.update(true, false, func(tx kv.Tx) error {
		var err error
		t, err = createTokenTx(tx, t)
		return err
	})
	return t, err
}

func createTokenTx(tx kv.Tx, t Token) (Token, error) {
	if _, ok := userTx(tx, t.UserID); !ok {
		return t, notFound("User")
	}
	byHash := tx.Bucket(bktTokensByHash)
	if byHash.Get(t.Hash) != nil || tx.Bucket(bktDeployByHash).Get(t.Hash) != nil {
		return t, &ConflictError{Reason: "Token has already been taken"}
	}
	b := tx.Bucket(bktTokens)
	id, err := nextID(b)
	if err != nil {
		return t, err
	}
	t.ID = id
	if err := putJSON(b, itob(id), t); err != nil {
		return t, err
	}
	if err := tx.Bucket(bktTokensByUser).Put(pair(t.UserID, id), emptyValue); err != nil {
		return t, err
	}
	return t, byHash.Put(t.Hash, itob(id))
}

// TokenByHash finds a personal access token and its user by the token's hash.
// It does not check whether the token is active.
func (s *Store) TokenByHash(hash []byte) (Token, User, error) {
	// A key passed to a kv interface escapes: this copy (one allocation on
	// auth's cache miss) keeps the caller's hash, an array on the stack of
	// every authenticated request, from being moved to the heap.
	key := bytes.Clone(hash)
	var t Token
	var u User
	err := s.db.View(func(tx kv.Tx) error {
		id := tx.Bucket(bktTokensByHash).Get(key)
		if id == nil || !getJSON(tx.Bucket(bktTokens), id, &t) {
			return notFound("Token")
		}
		var ok bool
		if u, ok = userTx(tx, t.UserID); !ok {
			return notFound("User")
		}
		return nil
	})
	return t, u, err
}

// Token returns a personal access token by id.
func (s *Store) Token(id int64) (Token, error) {
	var t Token
	err := s.db.View(func(tx kv.Tx) error {
		if !getJSON(tx.Bucket(bktTokens), itob(id), &t) {
			return notFound("Token")
		}
		return nil
	})
	return t, err
}

// RevokeToken marks a personal access token revoked. Revoking twice is not an error.
func (s *Store) RevokeToken(id int64) error {
	return s.update(true, false, func(tx kv.Tx) error {
		b := tx.Bucket(bktTokens)
		var t Token
		if !getJSON(b, itob(id), &t) {
			return notFound("Token")
		}
		t.Revoked = true
		return putJSON(b, itob(id), t)
	})
}
