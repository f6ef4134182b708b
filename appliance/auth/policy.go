package auth

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrAuthFailed is the only answer a client gets to a refused CONNECT:
// nothing about which part was wrong.
var ErrAuthFailed = errors.New("authentication failed")

// Options build a Policy.
type Options struct {
	// Users is the users file; nil runs without one: every connection is
	// anonymous with full access, and only loopback peers are accepted
	// unless AllowAnonymous.
	Users *File
	// AllowAnonymous accepts connections without a login: with a users
	// file they get the Anonymous grants; without one, from any address
	// with full access.
	AllowAnonymous bool
	// Anonymous are the grants of connections without a login (with a users
	// file).
	Anonymous Grants
	// External: a login the users file cannot check (no such user, or one
	// without a password) is decided by an external command; Authenticate
	// answers ErrExternal and the caller runs it, then calls External.
	External bool
}

// ErrExternal is Authenticate's answer when an external command must
// decide; the Identity returned names the login.
var ErrExternal = errors.New("external authentication needed")

// Policy decides who may connect and what each identity may do. It is
// immutable: a reload builds a new one.
type Policy struct {
	open      bool // no users file
	allowAnon bool
	anon      acl
	users     map[string]*principal
	groups    map[string]*acl
	external  bool
	dummy     hash // checked for unknown users, so they take as long

	hashChecks atomic.Int64 // argon2id computations run (tests: an unknown user costs one too)
}

type principal struct {
	hash *hash // nil: no password (certificate only)
	acl  acl
}

// NewPolicy compiles o.
func NewPolicy(o Options) (*Policy, error) {
	p := &Policy{open: o.Users == nil, allowAnon: o.AllowAnonymous, users: map[string]*principal{}, groups: map[string]*acl{}, external: o.External && o.Users != nil}
	if err := o.Anonymous.Check("auth.anonymous"); err != nil {
		return nil, err
	}
	if err := p.anon.add(o.Anonymous); err != nil {
		return nil, err
	}
	// A fixed dummy of the default parameters: an unknown user costs what
	// a known one does.
	p.dummy = hash{memory: HashMemoryKiB, time: HashTime, threads: HashThreads, salt: make([]byte, hashSaltLen), key: make([]byte, hashKeyLen)}
	if o.Users == nil {
		return p, nil
	}
	if err := o.Users.Check(); err != nil {
		return nil, err
	}
	for name, g := range o.Users.Groups {
		a := &acl{}
		if g != nil {
			if err := a.add(*g); err != nil {
				return nil, err
			}
		}
		p.groups[name] = a
	}
	for name, u := range o.Users.Users {
		pr := &principal{}
		if u.Password != "" {
			h, err := ParseHash(u.Password)
			if err != nil {
				return nil, fmt.Errorf("users.%s.password: %w", name, err)
			}
			pr.hash = &h
		}
		if err := pr.acl.add(u.Grants); err != nil {
			return nil, err
		}
		for _, g := range u.Groups {
			if gr := o.Users.Groups[g]; gr != nil {
				if err := pr.acl.add(*gr); err != nil {
					return nil, err
				}
			}
		}
		p.users[name] = pr
	}
	return p, nil
}

// Open reports whether the policy runs without a users file.
func (p *Policy) Open() bool { return p.open }

// Users is the number of users known.
func (p *Policy) Users() int { return len(p.users) }

// Identity is who a connection is.
type Identity struct {
	User      string // the user (or, without a users file, the login given)
	Anonymous bool   // no login: the anonymous role (or full access without a users file)
	Method    string // "password", "certificate", "anonymous", "open", "command"
	// Groups named by an external command, whose grants (from the users
	// file's [groups]) apply besides the user's own.
	Groups []string
}

// Name is the identity as logs and metrics show it.
func (id Identity) Name() string {
	if id.Anonymous || id.User == "" {
		return "anonymous"
	}
	return id.User
}

// Authenticate decides a CONNECT. certNames are the identities of a client
// certificate the TLS layer verified (common name first, then subject
// alternative names); loopback says whether the peer's address is a
// loopback address. A password is compared in constant time, and an
// unknown user costs as much as a known one. The error is ErrAuthFailed,
// wrapped with the reason for the log (never for the client).
func (p *Policy) Authenticate(login, passcode string, certNames []string, loopback bool) (Identity, error) {
	if p.open {
		if !loopback && !p.allowAnon {
			return Identity{}, fmt.Errorf("%w: no users file, and only loopback clients are accepted without one (set auth.users_file, or auth.allow_anonymous = true)", ErrAuthFailed)
		}
		return Identity{User: login, Anonymous: true, Method: "open"}, nil
	}
	certUser := ""
	for _, n := range certNames {
		if _, ok := p.users[n]; ok {
			certUser = n
			break
		}
	}
	switch {
	case certUser != "" && (login == "" || login == certUser):
		return Identity{User: certUser, Method: "certificate"}, nil
	case login == "":
		if !p.allowAnon {
			return Identity{}, fmt.Errorf("%w: no login, and auth.allow_anonymous is false", ErrAuthFailed)
		}
		return Identity{Anonymous: true, Method: "anonymous"}, nil
	}
	pr := p.users[login]
	if p.external && (pr == nil || pr.hash == nil) {
		return Identity{User: login, Method: "command"}, ErrExternal
	}
	h := &p.dummy
	if pr != nil && pr.hash != nil {
		h = pr.hash
	}
	ok := h.verify(passcode)
	p.hashChecks.Add(1)
	if pr == nil {
		return Identity{}, fmt.Errorf("%w: unknown user", ErrAuthFailed)
	}
	if pr.hash == nil || !ok {
		return Identity{}, fmt.Errorf("%w: wrong password", ErrAuthFailed)
	}
	return Identity{User: login, Method: "password"}, nil
}

// Allowed reports whether id may use permission perm on destination name
// of kind (KindQueue or KindTopic; name may be a wildcard topic pattern).
func (p *Policy) Allowed(id Identity, perm Perm, kind, name string) bool {
	if p.open {
		return true
	}
	if id.Anonymous {
		return p.allowAnon && p.anon.allows(perm, kind, name)
	}
	if pr := p.users[id.User]; pr != nil && pr.acl.allows(perm, kind, name) {
		return true
	}
	for _, g := range id.Groups {
		if a := p.groups[g]; a != nil && a.allows(perm, kind, name) {
			return true
		}
	}
	return false
}

// External is the identity of login once an external command allowed it,
// with the groups it named; groups the users file does not define are
// dropped (and returned, for the log).
func (p *Policy) External(login string, groups []string) (Identity, []string) {
	id := Identity{User: login, Method: "command"}
	var unknown []string
	for _, g := range groups {
		if _, ok := p.groups[g]; ok {
			id.Groups = append(id.Groups, g)
		} else {
			unknown = append(unknown, g)
		}
	}
	return id, unknown
}

// Valid reports whether id could still connect under p (after a reload):
// its user still exists, or anonymous connections are still allowed.
func (p *Policy) Valid(id Identity) bool {
	switch {
	case p.open:
		return true
	case id.Anonymous:
		return p.allowAnon
	case id.Method == "command":
		return p.external
	}
	_, ok := p.users[id.User]
	return ok
}
