package auth

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters of new hashes: OWASP's recommended minimum for
// argon2id (19 MiB of memory, 2 passes, 1 lane). A check costs about that
// memory for its duration; the broker bounds how many run at once, so a
// flood of CONNECTs costs a bounded amount of memory.
const (
	HashMemoryKiB = 19 * 1024
	HashTime      = 2
	HashThreads   = 1
	hashSaltLen   = 16
	hashKeyLen    = 32
)

// Bounds on the parameters a stored hash may carry: a users file cannot make
// one check take more than 256 MiB or more than 16 passes.
const (
	maxHashMemoryKiB = 256 * 1024
	maxHashTime      = 16
	maxHashThreads   = 16
)

// ErrHash is wrapped by errors about a stored hash.
var ErrHash = errors.New("invalid password hash")

// hash is a decoded argon2id hash in PHC string format:
// $argon2id$v=19$m=MEMORY,t=TIME,p=THREADS$SALT$KEY (base64, no padding).
type hash struct {
	memory  uint32
	time    uint32
	threads uint8
	salt    []byte
	key     []byte
}

var b64 = base64.RawStdEncoding

// HashPassword returns the argon2id hash of password with a random salt read
// from rand (crypto/rand.Reader in production).
func HashPassword(password string, rand io.Reader) (string, error) {
	if password == "" {
		return "", errors.New("empty password")
	}
	salt := make([]byte, hashSaltLen)
	if _, err := io.ReadFull(rand, salt); err != nil {
		return "", fmt.Errorf("read random salt: %w", err)
	}
	h := hash{memory: HashMemoryKiB, time: HashTime, threads: HashThreads, salt: salt}
	h.key = argon2.IDKey([]byte(password), salt, h.time, h.memory, h.threads, hashKeyLen)
	return h.String(), nil
}

func (h hash) String() string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, h.memory, h.time, h.threads, b64.EncodeToString(h.salt), b64.EncodeToString(h.key))
}

// ParseHash decodes and bounds-checks an argon2id PHC string.
func ParseHash(s string) (hash, error) {
	var h hash
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" {
		return h, fmt.Errorf("%w: want $argon2id$v=19$m=...,t=...,p=...$SALT$KEY (make one with: herald hash-password)", ErrHash)
	}
	if parts[1] != "argon2id" {
		return h, fmt.Errorf("%w: algorithm %q: only argon2id is supported (make one with: herald hash-password)", ErrHash, parts[1])
	}
	if parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return h, fmt.Errorf("%w: version %q: want v=%d", ErrHash, parts[2], argon2.Version)
	}
	seen := 0
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if !ok || err != nil {
			return h, fmt.Errorf("%w: parameter %q: want m=, t= and p= with integers", ErrHash, kv)
		}
		switch k {
		case "m":
			if n < 8 || n > maxHashMemoryKiB {
				return h, fmt.Errorf("%w: m=%d: memory must be 8 to %d KiB", ErrHash, n, maxHashMemoryKiB)
			}
			h.memory, seen = uint32(n), seen|1
		case "t":
			if n < 1 || n > maxHashTime {
				return h, fmt.Errorf("%w: t=%d: passes must be 1 to %d", ErrHash, n, maxHashTime)
			}
			h.time, seen = uint32(n), seen|2
		case "p":
			if n < 1 || n > maxHashThreads {
				return h, fmt.Errorf("%w: p=%d: lanes must be 1 to %d", ErrHash, n, maxHashThreads)
			}
			h.threads, seen = uint8(n), seen|4
		default:
			return h, fmt.Errorf("%w: unknown parameter %q", ErrHash, k)
		}
	}
	if seen != 7 || parts[3] != fmt.Sprintf("m=%d,t=%d,p=%d", h.memory, h.time, h.threads) {
		return h, fmt.Errorf("%w: parameters %q: want m=MEMORY,t=TIME,p=LANES in that order", ErrHash, parts[3])
	}
	if h.memory < 8*uint32(h.threads) {
		return h, fmt.Errorf("%w: m=%d: at least 8 KiB per lane", ErrHash, h.memory)
	}
	var err error
	if h.salt, err = b64.Strict().DecodeString(parts[4]); err != nil || len(h.salt) < 8 || len(h.salt) > 64 {
		return h, fmt.Errorf("%w: salt: want 8 to 64 bytes in unpadded base64", ErrHash)
	}
	if h.key, err = b64.Strict().DecodeString(parts[5]); err != nil || len(h.key) < 16 || len(h.key) > 64 {
		return h, fmt.Errorf("%w: key: want 16 to 64 bytes in unpadded base64", ErrHash)
	}
	return h, nil
}

// verify reports whether password matches, comparing in constant time.
func (h hash) verify(password string) bool {
	k := argon2.IDKey([]byte(password), h.salt, h.time, h.memory, h.threads, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(k, h.key) == 1
}

// VerifyPassword checks password against a stored hash string.
func VerifyPassword(stored, password string) (bool, error) {
	h, err := ParseHash(stored)
	if err != nil {
		return false, err
	}
	return h.verify(password), nil
}
