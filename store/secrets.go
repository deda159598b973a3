package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// sealer encrypts upstream passwords at rest with AES-256-GCM. The nonce is
// random per sealing and stored in front of the ciphertext.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("store: secret key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(plain string) []byte {
	if plain == "" {
		return nil
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("store: no randomness: " + err.Error())
	}
	return s.aead.Seal(nonce, nonce, []byte(plain), nil)
}

// errBadKey means the secret key does not open what was sealed: the key file
// was replaced or the database comes from another installation.
var errBadKey = errors.New("store: cannot decrypt an upstream password: secrets key does not match this database")

func (s *sealer) open(sealed []byte) (string, error) {
	if len(sealed) == 0 {
		return "", nil
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", errBadKey
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], nil)
	if err != nil {
		return "", errBadKey
	}
	return string(plain), nil
}
