package auth

import (
	"errors"
	"fmt"
	"strings"
)

// Perm is one permission on destinations.
type Perm uint8

// Permissions.
const (
	Read Perm = 1 << iota
	Write
	Create
)

// String is the permission's name as the users file, the CLI and ERROR
// frames write it.
func (p Perm) String() string {
	switch p {
	case Read:
		return "read"
	case Write:
		return "write"
	case Create:
		return "create"
	}
	return fmt.Sprintf("perm(%d)", uint8(p))
}

// ParsePerm reads "read", "write" or "create".
func ParsePerm(s string) (Perm, error) {
	switch s {
	case "read":
		return Read, nil
	case "write":
		return Write, nil
	case "create":
		return Create, nil
	}
	return 0, fmt.Errorf("unknown permission %q: want read, write or create", s)
}

// Kinds of destination a pattern names.
const (
	KindQueue = "/queue/"
	KindTopic = "/topic/"
	// KindStream names streams: read to subscribe, write to append,
	// create to make a stream that does not exist yet (as for queues).
	KindStream = "/stream/"
	KindKV     = "/kv/" // key-value buckets: /kv/BUCKET.KEY
	// KindLock names advisory locks: write to take one (SUBSCRIBE).
	KindLock = "/lock/"
)

// MaxPatternBytes bounds one pattern, as a destination name is bounded (255
// bytes after its prefix).
const MaxPatternBytes = 255 + len(KindStream)

// ErrPattern is wrapped by every pattern error.
var ErrPattern = errors.New("invalid destination pattern")

// Pattern is a parsed destination pattern.
type Pattern struct {
	kind string   // KindQueue or KindTopic
	segs []string // dot-separated segments; "*" and ">" are wildcards
	text string
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.text }

// ParsePattern checks and parses a destination pattern: /queue/NAME or
// /topic/NAME, NAME made of non-empty dot-separated segments of printable
// characters, * and > only as whole segments, > only last.
func ParsePattern(s string) (Pattern, error) {
	var kind, name string
	switch {
	case strings.HasPrefix(s, KindQueue):
		kind, name = KindQueue, s[len(KindQueue):]
	case strings.HasPrefix(s, KindTopic):
		kind, name = KindTopic, s[len(KindTopic):]
	case strings.HasPrefix(s, KindStream):
		kind, name = KindStream, s[len(KindStream):]
	case strings.HasPrefix(s, KindKV):
		kind, name = KindKV, s[len(KindKV):]
	case strings.HasPrefix(s, KindLock):
		kind, name = KindLock, s[len(KindLock):]
	default:
		return Pattern{}, fmt.Errorf("%w %q: start it with /queue/, /topic/, /stream/, /kv/ or /lock/ (example: /queue/orders.>)", ErrPattern, s)
	}
	if name == "" || len(name) > 255 {
		return Pattern{}, fmt.Errorf("%w %q: the name must be 1 to 255 bytes (use > for everything: %s>)", ErrPattern, s, kind)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c == 0xfffd {
			return Pattern{}, fmt.Errorf("%w %q: control characters and invalid UTF-8 are not allowed", ErrPattern, s)
		}
	}
	segs := strings.Split(name, ".")
	for i, g := range segs {
		if g == "" {
			return Pattern{}, fmt.Errorf("%w %q: empty segment between dots", ErrPattern, s)
		}
		if strings.ContainsAny(g, "*>") && g != "*" && g != ">" {
			return Pattern{}, fmt.Errorf("%w %q: * and > must be whole segments", ErrPattern, s)
		}
		if g == ">" && i != len(segs)-1 {
			return Pattern{}, fmt.Errorf("%w %q: > must be the last segment", ErrPattern, s)
		}
	}
	return Pattern{kind: kind, segs: segs, text: s}, nil
}

// Covers reports whether the pattern grants access to destination name of
// kind (KindQueue or KindTopic). name may itself be a wildcard subscription
// (topics): it is covered only if every destination it matches is.
func (p Pattern) Covers(kind, name string) bool {
	if kind != p.kind {
		return false
	}
	i := 0
	for len(name) > 0 || i < len(p.segs) {
		if i >= len(p.segs) {
			return false
		}
		g := p.segs[i]
		if g == ">" {
			return name != ""
		}
		if name == "" {
			return false
		}
		var n string
		if j := strings.IndexByte(name, '.'); j >= 0 {
			n, name = name[:j], name[j+1:]
			if name == "" {
				return false // a trailing dot: not a valid name
			}
		} else {
			n, name = name, ""
		}
		switch {
		case n == ">":
			return false // the name reaches further than any segment but >
		case g == "*":
		case n == "*" || g != n:
			return false
		}
		i++
	}
	return true
}

// Grants are the patterns a user, group or the anonymous role is granted,
// by permission.
type Grants struct {
	Read   []string `toml:"read" json:"read"`
	Write  []string `toml:"write" json:"write"`
	Create []string `toml:"create" json:"create"`
}

// list returns the pattern list of p.
func (g *Grants) list(p Perm) *[]string {
	switch p {
	case Read:
		return &g.Read
	case Write:
		return &g.Write
	case Create:
		return &g.Create
	}
	return nil
}

// Empty reports whether nothing is granted.
func (g Grants) Empty() bool { return len(g.Read)+len(g.Write)+len(g.Create) == 0 }

// Check validates every pattern; where names the owner in errors.
func (g Grants) Check(where string) error {
	var errs []error
	for _, p := range []Perm{Read, Write, Create} {
		for _, s := range *g.list(p) {
			if _, err := ParsePattern(s); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: %w", where, p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// acl is compiled grants: patterns by permission.
type acl struct {
	read, write, create []Pattern
}

func (a *acl) add(g Grants) error {
	for _, p := range []Perm{Read, Write, Create} {
		for _, s := range *g.list(p) {
			pat, err := ParsePattern(s)
			if err != nil {
				return err
			}
			switch p {
			case Read:
				a.read = append(a.read, pat)
			case Write:
				a.write = append(a.write, pat)
			case Create:
				a.create = append(a.create, pat)
			}
		}
	}
	return nil
}

func (a *acl) allows(p Perm, kind, name string) bool {
	var pats []Pattern
	switch p {
	case Read:
		pats = a.read
	case Write:
		pats = a.write
	case Create:
		pats = a.create
	}
	for _, pat := range pats {
		if pat.Covers(kind, name) {
			return true
		}
	}
	return false
}
