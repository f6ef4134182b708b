package multicast

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
)

// TagSize is the length of the truncated HMAC-SHA256 tag that ends an authenticated datagram.
const TagSize = 16

// Auth signs and verifies datagrams with HMAC-SHA256 truncated to TagSize bytes. The tag covers
// every byte of the datagram before it, header included (with FlagAuth and the key id set).
// A nil *Auth signs nothing and accepts only unauthenticated datagrams' absence of checks: see Verify.
// An Auth is not safe for concurrent use.
type Auth struct {
	keyID uint8
	mac   hash.Hash
	sum   [sha256.Size]byte
}

// NewAuth returns an Auth for key, or nil when key is empty.
func NewAuth(key []byte, keyID uint8) *Auth {
	if len(key) == 0 {
		return nil
	}
	return &Auth{keyID: keyID, mac: hmac.New(sha256.New, key)}
}

// Sign sets FlagAuth and the key id in the encoded datagram b and appends the tag.
func (a *Auth) Sign(b []byte) []byte {
	if a == nil {
		return b
	}
	b[4] |= FlagAuth
	b[5] = a.keyID
	a.mac.Reset()
	a.mac.Write(b)
	s := a.mac.Sum(a.sum[:0])
	return append(b, s[:TagSize]...)
}

// Verify reports whether b is acceptable: with a nil Auth every datagram is (a tag, if any, is
// ignored); otherwise b must carry FlagAuth, this key id and a valid tag.
func (a *Auth) Verify(b []byte) bool {
	if a == nil {
		return true
	}
	if len(b) < HeaderSize+TagSize || b[4]&FlagAuth == 0 || b[5] != a.keyID {
		return false
	}
	n := len(b) - TagSize
	a.mac.Reset()
	a.mac.Write(b[:n])
	s := a.mac.Sum(a.sum[:0])
	return hmac.Equal(s[:TagSize], b[n:])
}
