package proxy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"time"
)

// gatewayMaxSkew is how far a gateway token's iat may be from now, either way.
const gatewayMaxSkew = 90 * time.Second

// maxGatewayToken bounds the header before any decoding.
const maxGatewayToken = 4096

var errGatewayToken = errors.New("invalid gateway token")

// verifyGatewayToken checks a Svc-Gateway-Api-Request JWT: compact form,
// header alg HS256 (no other algorithm, "none" included, is accepted),
// HMAC-SHA256 over "header.payload" with secret compared in constant time,
// a numeric iat within 90 seconds of now, and exp / nbf honoured when present.
// No JWT library: this is the whole of what is needed.
func verifyGatewayToken(token []byte, secret []byte, now time.Time) error {
	if len(token) == 0 || len(token) > maxGatewayToken {
		return errGatewayToken
	}
	h64, rest, ok := bytes.Cut(token, []byte("."))
	if !ok {
		return errGatewayToken
	}
	p64, s64, ok := bytes.Cut(rest, []byte("."))
	if !ok || bytes.IndexByte(s64, '.') >= 0 {
		return errGatewayToken
	}
	sig := make([]byte, base64.RawURLEncoding.DecodedLen(len(s64)))
	n, err := base64.RawURLEncoding.Decode(sig, s64)
	if err != nil || n != sha256.Size {
		return errGatewayToken
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(token[:len(h64)+1+len(p64)])
	if !hmac.Equal(mac.Sum(nil), sig[:n]) {
		return errGatewayToken
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if decodeSegment(h64, &hdr) != nil || hdr.Alg != "HS256" {
		return errGatewayToken
	}
	var claims struct {
		Iat *float64 `json:"iat"`
		Exp *float64 `json:"exp"`
		Nbf *float64 `json:"nbf"`
	}
	if decodeSegment(p64, &claims) != nil || claims.Iat == nil {
		return errGatewayToken
	}
	t := float64(now.UnixNano()) / 1e9
	skew := gatewayMaxSkew.Seconds()
	switch {
	case math.IsNaN(*claims.Iat) || math.Abs(t-*claims.Iat) > skew:
		return errGatewayToken
	case claims.Exp != nil && t >= *claims.Exp:
		return errGatewayToken
	case claims.Nbf != nil && t+skew < *claims.Nbf:
		return errGatewayToken
	}
	return nil
}

func decodeSegment(seg []byte, v any) error {
	raw := make([]byte, base64.RawURLEncoding.DecodedLen(len(seg)))
	n, err := base64.RawURLEncoding.Decode(raw, seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw[:n], v)
}
