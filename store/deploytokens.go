package store

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"time"

	"registryd/store/kv"
)

// DeployToken is a group deploy token: good for downloads from the group's
// virtual registries only. Only the SHA-256 of its value is stored.
type DeployToken struct {
	ID        int64      `json:"id"`
	GroupID   int64      `json:"group_id"`
	Name      string     `json:"name"`
	Username  string     `json:"username"`
	Scopes    []string   `json:"scopes"`
	Hash      []byte     `json:"hash"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Revoked   bool       `json:"revoked"`
	CreatedAt time.Time  `json:"created_at"`
}

// Active reports whether the token may authenticate at now.
func (t DeployToken) Active(now time.Time) bool { return !t.Revoked && !expired(t.ExpiresAt, now) }

// deployUsernameRE is GitLab's rule for deploy token usernames: unlike user
// names they may contain '+', as the default gitlab+deploy-token-<id> does.
var deployUsernameRE = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)

// NewDeployToken is the input of CreateDeployToken.
type NewDeployToken struct {
	GroupID        int64
	Name, Username string
	Scopes         []string
	ExpiresAt      *time.Time
	Plain          string
}

// CreateDeployToken stores a group deploy token. Without a username it gets
// "gitlab+deploy-token-<id>", as GitLab names them.
func (s *Store) CreateDeployToken(n NewDeployToken) (DeployToken, error) {
	v := &ValidationError{}
	validTokenName(v, n.Name)
	validScopes(v, n.Scopes, deployScopes)
	if len(n.Username) > 255 {
		v.Add("username", "is too long (maximum is 255 characters)")
	} else if n.Username != "" && !deployUsernameRE.MatchString(n.Username) {
		v.Add("username", "can contain only letters, digits, '_', '-', '+', and '.'")
	}
	if n.ExpiresAt != nil && !n.ExpiresAt.After(s.clock()) {
		v.Add("expires_at", "must be in the future")
	}
	if err := v.Err(); err != nil {
		return DeployToken{}, err
	}
	t := DeployToken{GroupID: n.GroupID, Name: n.Name, Username: n.Username,
		Scopes: slices.Compact(slices.Sorted(slices.Values(n.Scopes))), Hash: hashToken(n.Plain),
		ExpiresAt: n.ExpiresAt, CreatedAt: s.clock()}
	err := s.update(true, false, func(tx kv.Tx) error {
		t.Username = n.Username // derived from the id below; kv may run the function again
		if _, ok := groupTx(tx, n.GroupID); !ok {
			return notFound("Group")
		}
		byHash := tx.Bucket(bktDeployByHash)
		if byHash.Get(t.Hash) != nil || tx.Bucket(bktTokensByHash).Get(t.Hash) != nil {
			return &ConflictError{Reason: "Token has already been taken"}
		}
		b := tx.Bucket(bktDeployTokens)
		id, err := nextID(b)
		if err != nil {
			return err
		}
		t.ID = id
		if t.Username == "" {
			t.Username = fmt.Sprintf("gitlab+deploy-token-%d", id)
		}
		if err := putJSON(b, itob(id), t); err != nil {
			return err
		}
		if err := tx.Bucket(bktDeployByGroup).Put(pair(t.GroupID, id), emptyValue); err != nil {
			return err
		}
		return byHash.Put(t.Hash, itob(id))
	})
	return t, err
}

// DeployTokenByHash finds a deploy token by the hash of its value. It does not
// check whether the token is active.
func (s *Store) DeployTokenByHash(hash []byte) (DeployToken, error) {
	key := bytes.Clone(hash) // see TokenByHash
	var t DeployToken
	err := s.db.View(func(tx kv.Tx) error {
		id := tx.Bucket(bktDeployByHash).Get(key)
		if id == nil || !getJSON(tx.Bucket(bktDeployTokens), id, &t) {
			return notFound("Deploy Token")
		}
		return nil
	})
	return t, err
}
