package store

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"strings"
	"time"

	"registryd/store/kv"
)

// User is a person or robot that holds tokens and memberships.
type User struct {
	ID           int64     `json:"id"`
	Username     string    `json:"username"`
	Name         string    `json:"name"`
	Email        string    `json:"email"`
	PasswordHash string    `json:"password_hash,omitempty"`
	Admin        bool      `json:"admin"`
	State        string    `json:"state"`
	CreatedAt    time.Time `json:"created_at"`
}

// NewUser is the input of CreateUser.
type NewUser struct {
	Username, Name, Email, Password string
	Admin                           bool
}

var usernameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

func (n NewUser) validate() error {
	v := &ValidationError{}
	switch {
	case n.Username == "":
		v.Add("username", "can't be blank")
	case len(n.Username) > 255:
		v.Add("username", "is too long (maximum is 255 characters)")
	case !usernameRE.MatchString(n.Username) || strings.HasSuffix(n.Username, ".git") || strings.HasSuffix(n.Username, "."):
		v.Add("username", "can contain only letters, digits, '_', '-' and '.'. Cannot start with '-' or end in '.', '.git' or '.atom'.")
	}
	switch {
	case strings.TrimSpace(n.Name) == "":
		v.Add("name", "can't be blank")
	case overLimit(n.Name, 255):
		v.Add("name", "is too long (maximum is 255 characters)")
	}
	switch {
	case n.Email == "":
		v.Add("email", "can't be blank")
	case len(n.Email) > 255 || !strings.Contains(n.Email, "@") || strings.ContainsAny(n.Email, " \t\r\n"):
		v.Add("email", "is invalid")
	}
	if n.Password != "" && (len(n.Password) < 8 || len(n.Password) > 128) {
		v.Add("password", "is too short (minimum is 8 characters)")
	}
	return v.Err()
}

// hashPassword keeps passwords as salted PBKDF2-SHA256; registryd never needs
// them back and authenticates API calls with tokens only.
func hashPassword(pw string) string {
	if pw == "" {
		return ""
	}
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	key, err := pbkdf2.Key(sha256.New, pw, salt, 210000, 32)
	if err != nil {
		panic("store: pbkdf2: " + err.Error())
	}
	return "pbkdf2-sha256$210000$" + base64.RawStdEncoding.EncodeToString(salt) + "$" + base64.RawStdEncoding.EncodeToString(key)
}

// CreateUser adds a user. A taken username or email is a ConflictError.
func (s *Store) CreateUser(n NewUser) (User, error) {
	if err := n.validate(); err != nil {
		return User{}, err
	}
	u := User{Username: n.Username, Name: n.Name, Email: n.Email, Admin: n.Admin, State: "active",
		PasswordHash: hashPassword(n.Password), CreatedAt: s.clock()}
	err := s.update(true, false, func(tx kv.Tx) error {
		var err error
		u, err = createUserTx(tx, u)
		return err
	})
	return u, err
}

func createUserTx(tx kv.Tx, u User) (User, error) {
	byName, byEmail := tx.Bucket(bktUsersByName), tx.Bucket(bktUsersByEmail)
	if byName.Get(lower(u.Username)) != nil {
		return u, &ConflictError{Reason: "Username has already been taken"}
	}
	if byEmail.Get(lower(u.Email)) != nil {
		return u, &ConflictError{Reason: "Email has already been taken"}
	}
	users := tx.Bucket(bktUsers)
	id, err := nextID(users)
	if err != nil {
		return u, err
	}
	u.ID = id
	if err := putJSON(users, itob(id), u); err != nil {
		return u, err
	}
	if err := byName.Put(lower(u.Username), itob(id)); err != nil {
		return u, err
	}
	return u, byEmail.Put(lower(u.Email), itob(id))
}

// User returns the user with id.
func (s *Store) User(id int64) (User, error) {
	var u User
	err := s.db.View(func(tx kv.Tx) error {
		var ok bool
		u, ok = userTx(tx, id)
		if !ok {
			return notFound("User")
		}
		return nil
	})
	return u, err
}

func userTx(tx kv.Tx, id int64) (User, bool) {
	var u User
	ok := getJSON(tx.Bucket(bktUsers), itob(id), &u)
	return u, ok
}

// UserByUsername finds a user by username, case-insensitively.
func (s *Store) UserByUsername(name string) (User, error) {
	var u User
	err := s.db.View(func(tx kv.Tx) error {
		id := tx.Bucket(bktUsersByName).Get(lower(name))
		if id == nil {
			return notFound("User")
		}
		u, _ = userTx(tx, btoi(id))
		return nil
	})
	return u, err
}

// countUsers is how many users exist.
func (s *Store) countUsers() int {
	n := 0
	_ = s.db.View(func(tx kv.Tx) error { n = int(keyCounts(tx)[countUsers]); return nil })
	return n
}

// ListUsers returns one page of users by id and the total count.
func (s *Store) ListUsers(offset, limit int) ([]User, int, error) {
	var out []User
	total := 0
	err := s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bktUsers)
		total = int(keyCounts(tx)[countUsers])
		c := b.Cursor()
		i := 0
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			if i >= offset {
				var u User
				getJSON(b, k, &u)
				out = append(out, u)
			}
			i++
		}
		return nil
	})
	return out, total, err
}
