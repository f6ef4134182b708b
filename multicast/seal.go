package multicast

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// Sealing (docs/multicast-protocol.md, section 6, "Sealing"): with seal on, the sender encrypts
// the body of every datagram it sends with XChaCha20-Poly1305 under a key derived from the
// channel key by HKDF-SHA256, the header authenticated as associated data.
const (
	// SealOverhead is what sealing adds to a datagram: the u64 seal counter and the 16-byte
	// Poly1305 tag.
	SealOverhead = 8 + chacha20poly1305.Overhead
	// SealInfo is the HKDF info string of the seal key (the HMAC key is the channel key itself).
	SealInfo = "herald multicast seal v1"
	// KeyOverlap: once a receiver has opened a datagram under a new key id, it still accepts the
	// key it used before for this long (repairs and datagrams in flight), then refuses it.
	KeyOverlap = 10 * time.Second
)

// ErrSealed is returned for a sealed datagram a receiver cannot open: it has no key.
var ErrSealed = errors.New("multicast: sealed datagram and no key to open it (counted as sealed)")

// Key is a channel key and its one-byte id.
type Key struct {
	ID     uint8
	Secret []byte
}

// sealKey derives the AEAD key from a channel key.
func sealKey(secret []byte) []byte {
	k, err := hkdf.Key(sha256.New, secret, nil, SealInfo, chacha20poly1305.KeySize)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 HKDF never fail
	}
	return k
}

// Sealer seals the datagrams of one sender. Each datagram gets the next seal counter: the
// nonce (session id, counter) never repeats for a key within a session, repairs included, and
// session ids differ between sessions. Not safe for concurrent use.
type Sealer struct {
	id      uint8
	aead    cipher.AEAD
	counter uint64
	nonce   [chacha20poly1305.NonceSizeX]byte
}

// NewSealer returns a Sealer for k (nil when k has no secret).
func NewSealer(k Key) *Sealer {
	if len(k.Secret) == 0 {
		return nil
	}
	a, err := chacha20poly1305.NewX(sealKey(k.Secret))
	if err != nil {
		panic(err)
	}
	return &Sealer{id: k.ID, aead: a}
}

// sealNonce is the 24-byte nonce: session id, seal counter (both little-endian), 8 zero bytes.
func sealNonce(n *[chacha20poly1305.NonceSizeX]byte, session, counter uint64) []byte {
	binary.LittleEndian.PutUint64(n[0:], session)
	binary.LittleEndian.PutUint64(n[8:], counter)
	clear(n[16:])
	return n[:]
}

// Seal returns the sealed form of the encoded datagram b (unsigned, without tag): its header
// with FlagSealed and the key id set (FlagAuth cleared), the u64 seal counter, then the body
// encrypted and its tag. The header and counter are the associated data. b is not changed.
func (s *Sealer) Seal(b []byte) []byte {
	s.counter++
	out := make([]byte, HeaderSize+8, len(b)+SealOverhead)
	copy(out, b[:HeaderSize])
	out[4] = out[4]&^FlagAuth | FlagSealed
	out[5] = s.id
	binary.LittleEndian.PutUint64(out[HeaderSize:], s.counter)
	session := binary.LittleEndian.Uint64(out[8:])
	return s.aead.Seal(out, sealNonce(&s.nonce, session, s.counter), b[HeaderSize:], out)
}

// keyEntry is one key a Keyring accepts.
type keyEntry struct {
	id      uint8
	auth    *Auth
	aead    cipher.AEAD
	retired bool // its overlap ran out after another key took over: refused from then on
}

// Keyring opens and verifies the datagrams a receiver gets under any of its keys, with
// rotation: the key of the latest datagram taken as new (Accept) under a key other than the
// current one becomes current; the one before stays accepted for KeyOverlap, then is retired
// (refused) until restart. A datagram the receiver drops after opening it (a replay, a
// duplicate, a stale session) changes nothing. Not safe for concurrent use.
type Keyring struct {
	keys     []keyEntry
	seal     bool // unsealed datagrams are refused
	current  int  // index in keys of the current key, -1 before the first datagram
	previous int  // index of the key before it (-1: none), accepted until prevEnd
	prevEnd  time.Time
	last     int // index of the key that opened the datagram Open last accepted
	opened   []byte
	nonce    [chacha20poly1305.NonceSizeX]byte
}

// NewKeyring returns a Keyring for keys (nil when there are none). seal: refuse datagrams that
// are not sealed (else both sealed and HMAC-signed datagrams are accepted under the keys).
func NewKeyring(keys []Key, seal bool) (*Keyring, error) {
	if len(keys) == 0 {
		if seal {
			return nil, fmt.Errorf("seal without a key: %w", ErrBadConfig)
		}
		return nil, nil
	}
	k := &Keyring{seal: seal, current: -1, previous: -1, last: -1}
	for _, key := range keys {
		if len(key.Secret) == 0 {
			return nil, fmt.Errorf("key id %d: empty key: %w", key.ID, ErrBadConfig)
		}
		for _, e := range k.keys {
			if e.id == key.ID {
				return nil, fmt.Errorf("key id %d given twice: %w", key.ID, ErrBadConfig)
			}
		}
		a, _ := chacha20poly1305.NewX(sealKey(key.Secret))
		k.keys = append(k.keys, keyEntry{id: key.ID, auth: NewAuth(key.Secret, key.ID), aead: a})
	}
	return k, nil
}

// Auth is the HMAC signer of the current key (the first key before any datagram): NAKs are
// signed with it.
func (k *Keyring) Auth() *Auth {
	if k == nil {
		return nil
	}
	return k.keys[max(k.current, 0)].auth
}

// admit reports whether a datagram that verified under keys[i] at now is accepted: its key is
// not retired (the previous key is retired once its overlap has run out). It does not change
// which key is current.
func (k *Keyring) admit(i int, now time.Time) bool {
	if k.previous >= 0 && !now.Before(k.prevEnd) {
		k.keys[k.previous].retired = true
		k.previous = -1
	}
	return !k.keys[i].retired
}

// Accept applies the rotation rule to the datagram Open accepted last, once the receiver has
// taken it as new (it started a session, or filled a sequence): under a key other than the
// current one, that key becomes current and the one in use until now is accepted for KeyOverlap
// more. A key the receiver has left is retired (refused by Open), so it never becomes current
// again.
func (k *Keyring) Accept(now time.Time) {
	if k != nil {
		k.use(k.last, now)
	}
}

func (k *Keyring) use(i int, now time.Time) {
	if i < 0 || k.keys[i].retired {
		return
	}
	switch {
	case k.current < 0:
		k.current = i
	case i == k.current || i == k.previous:
	default: // a new key: the one in use until now is accepted for KeyOverlap more
		if k.previous >= 0 {
			k.keys[k.previous].retired = true
		}
		k.previous, k.current, k.prevEnd = k.current, i, now.Add(KeyOverlap)
	}
}

// Open checks b at now: a sealed datagram is opened (the result is the plain datagram, valid
// until the next call), an HMAC-signed one verified (returned as is). It returns nil with
// ErrSealed when b is sealed and k is nil, ErrAuth when b is not acceptable. Which key is current
// changes only with Accept.
func (k *Keyring) Open(b []byte, now time.Time) ([]byte, error) {
	sealed := len(b) >= HeaderSize && b[4]&FlagSealed != 0
	if k == nil {
		if sealed {
			return nil, ErrSealed
		}
		return b, nil
	}
	if len(b) < HeaderSize {
		return nil, ErrAuth
	}
	i := -1
	for j := range k.keys {
		if k.keys[j].id == b[5] {
			i = j
		}
	}
	if i < 0 {
		return nil, ErrAuth
	}
	e := &k.keys[i]
	if !sealed {
		if k.seal || !e.auth.Verify(b) || !k.admit(i, now) {
			return nil, ErrAuth
		}
		k.last = i
		return b, nil
	}
	if len(b) < HeaderSize+SealOverhead || b[4]&FlagAuth != 0 {
		return nil, ErrAuth
	}
	ad := b[:HeaderSize+8]
	counter := binary.LittleEndian.Uint64(b[HeaderSize:])
	session := binary.LittleEndian.Uint64(b[8:])
	out := append(k.opened[:0], b[:HeaderSize]...)
	out, err := e.aead.Open(out, sealNonce(&k.nonce, session, counter), b[HeaderSize+8:], ad)
	if err != nil || !k.admit(i, now) {
		return nil, ErrAuth
	}
	k.last = i
	k.opened = out
	out[4] &^= FlagSealed
	return out, nil
}
