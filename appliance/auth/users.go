package auth

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// The users file (TOML), for example /etc/herald/users.toml, mode 0640
// root:herald:
//
//	[users.alice]
//	password = "$argon2id$v=19$m=19456,t=2,p=1$...$..."
//	groups = ["ops"]
//	read = ["/queue/orders.>"]
//	write = ["/queue/orders.>"]
//	create = []
//
//	[groups.ops]
//	read = ["/topic/metrics.>", "/queue/DLQ.>"]
//
// A user without a password can only log in with a client certificate whose
// identity is the user's name.

// User is one entry of the users file.
type User struct {
	Password string   `toml:"password"`
	Groups   []string `toml:"groups"`
	Grants
}

// File is the decoded users file.
type File struct {
	Users  map[string]*User   `toml:"users"`
	Groups map[string]*Grants `toml:"groups"`
}

// Bounds on the users file, checked before it is parsed.
const (
	MaxUsersFileBytes = 4 << 20 // 4 MiB: tens of thousands of users
	maxUsersNesting   = 8       // the file nests 3 deep
	MaxNameBytes      = 128
)

// DecodeUsers parses and validates a users file. Unknown keys, bad hashes,
// bad patterns and undefined groups are errors naming the user or group.
func DecodeUsers(src []byte) (*File, error) {
	if len(src) > MaxUsersFileBytes {
		return nil, fmt.Errorf("users file larger than %d bytes, the limit", MaxUsersFileBytes)
	}
	if !utf8.Valid(src) {
		return nil, errors.New("users file is not valid UTF-8")
	}
	if err := checkNesting(string(src)); err != nil {
		return nil, err
	}
	var f File
	md, err := toml.Decode(string(src), &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		var keys []string
		for i, k := range und {
			if i == 10 {
				keys = append(keys, fmt.Sprintf("and %d more", len(und)-i))
				break
			}
			keys = append(keys, fmt.Sprintf("%q", k.String()))
		}
		return nil, fmt.Errorf("unknown keys %s: a user has password, groups, read, write, create; a group read, write, create", strings.Join(keys, ", "))
	}
	if f.Users == nil {
		f.Users = map[string]*User{}
	}
	if f.Groups == nil {
		f.Groups = map[string]*Grants{}
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	return &f, nil
}

// CheckName validates a user or group name: 1 to 128 bytes of printable
// UTF-8.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("name %q: must be 1 to %d bytes", name, MaxNameBytes)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c == utf8.RuneError {
			return fmt.Errorf("name %q: control characters and invalid UTF-8 are not allowed", name)
		}
	}
	return nil
}

// Check validates the whole file, reporting every problem.
func (f *File) Check() error {
	var errs []error
	for _, name := range sortedKeys(f.Users) {
		u := f.Users[name]
		where := "users." + name
		if u == nil {
			errs = append(errs, fmt.Errorf("%s: empty entry", where))
			continue
		}
		if err := CheckName(name); err != nil {
			errs = append(errs, fmt.Errorf("users: %w", err))
		}
		if u.Password != "" {
			if _, err := ParseHash(u.Password); err != nil {
				errs = append(errs, fmt.Errorf("%s.password: %w", where, err))
			}
		}
		for _, g := range u.Groups {
			if _, ok := f.Groups[g]; !ok {
				errs = append(errs, fmt.Errorf("%s.groups: group %q is not defined: add a [groups.%s] table or remove it", where, g, g))
			}
		}
		if err := u.Grants.Check(where); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range sortedKeys(f.Groups) {
		g := f.Groups[name]
		if g == nil {
			f.Groups[name] = &Grants{}
			continue
		}
		if err := CheckName(name); err != nil {
			errs = append(errs, fmt.Errorf("groups: %w", err))
		}
		if err := g.Check("groups." + name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// checkNesting refuses text nesting tables, arrays or inline tables deeper
// than maxUsersNesting, before the parser sees it (its cost grows fast with
// depth). It skips comments and strings.
func checkNesting(src string) error {
	depth, line := 0, 1
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '\n':
			line++
		case '#':
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			i, line = SkipTOMLString(src, i, line)
		case '[', '{':
			depth++
			if depth > maxUsersNesting {
				return fmt.Errorf("line %d: nested more than %d deep, the limit for a users file", line, maxUsersNesting)
			}
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// Encode writes the file as TOML, users and groups sorted by name, with a
// header comment. Decoding the result gives the same file.
func (f *File) Encode() []byte {
	var b strings.Builder
	b.WriteString("# Herald users file: edit with `herald user add|passwd|del|grant|revoke|list --file FILE`.\n")
	b.WriteString("# Passwords are argon2id hashes (herald hash-password). Permissions: read (SUBSCRIBE),\n")
	b.WriteString("# write (SEND), create (a SEND or SUBSCRIBE that creates a queue) on /queue/, /topic/, /stream/ and /kv/\n")
	b.WriteString("# patterns, and write on /lock/NAME to take a lock; * one segment, > the rest. Nothing is allowed unless granted.\n")
	for _, name := range sortedKeys(f.Users) {
		u := f.Users[name]
		fmt.Fprintf(&b, "\n[users.%s]\n", quote(name))
		if u.Password != "" {
			fmt.Fprintf(&b, "password = %s\n", quote(u.Password))
		}
		if len(u.Groups) > 0 {
			fmt.Fprintf(&b, "groups = %s\n", quoteList(u.Groups))
		}
		writeGrants(&b, u.Grants)
	}
	for _, name := range sortedKeys(f.Groups) {
		fmt.Fprintf(&b, "\n[groups.%s]\n", quote(name))
		writeGrants(&b, *f.Groups[name])
	}
	return []byte(b.String())
}

func writeGrants(b *strings.Builder, g Grants) {
	for _, p := range []Perm{Read, Write, Create} {
		if l := *g.list(p); len(l) > 0 {
			fmt.Fprintf(b, "%s = %s\n", p, quoteList(l))
		}
	}
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// --- edits (herald user ...) ----------------------------------------------

// ErrNoUser and ErrUserExists are returned by the edits.
var (
	ErrNoUser     = errors.New("no such user")
	ErrNoGroup    = errors.New("no such group")
	ErrUserExists = errors.New("user already exists")
)

// AddUser adds a user with a password hash (may be empty: certificate only)
// and groups; groups that do not exist are created empty.
func (f *File) AddUser(name, passwordHash string, groups []string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if _, ok := f.Users[name]; ok {
		return fmt.Errorf("%w: %q (change its password with: herald user passwd)", ErrUserExists, name)
	}
	for _, g := range groups {
		if err := CheckName(g); err != nil {
			return fmt.Errorf("group: %w", err)
		}
		if _, ok := f.Groups[g]; !ok {
			f.Groups[g] = &Grants{}
		}
	}
	f.Users[name] = &User{Password: passwordHash, Groups: slices.Clone(groups)}
	return nil
}

// SetPassword replaces a user's password hash.
func (f *File) SetPassword(name, passwordHash string) error {
	u, ok := f.Users[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoUser, name)
	}
	u.Password = passwordHash
	return nil
}

// DelUser removes a user.
func (f *File) DelUser(name string) error {
	if _, ok := f.Users[name]; !ok {
		return fmt.Errorf("%w: %q", ErrNoUser, name)
	}
	delete(f.Users, name)
	return nil
}

// grantsOf returns the grants of user name, or of group name when group is
// set (a group is created on its first grant).
func (f *File) grantsOf(name string, group, create bool) (*Grants, error) {
	if group {
		g, ok := f.Groups[name]
		if !ok {
			if !create {
				return nil, fmt.Errorf("%w: %q", ErrNoGroup, name)
			}
			if err := CheckName(name); err != nil {
				return nil, err
			}
			g = &Grants{}
			f.Groups[name] = g
		}
		return g, nil
	}
	u, ok := f.Users[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (add it with: herald user add)", ErrNoUser, name)
	}
	return &u.Grants, nil
}

// Grant gives user (or group) name permission p on pattern; granting twice
// is not an error.
func (f *File) Grant(name string, group bool, p Perm, pattern string) error {
	if _, err := ParsePattern(pattern); err != nil {
		return err
	}
	g, err := f.grantsOf(name, group, true)
	if err != nil {
		return err
	}
	l := g.list(p)
	if !slices.Contains(*l, pattern) {
		*l = append(*l, pattern)
	}
	return nil
}

// Revoke removes exactly pattern from the permission p of user (or group)
// name; false if it was not granted.
func (f *File) Revoke(name string, group bool, p Perm, pattern string) (bool, error) {
	g, err := f.grantsOf(name, group, false)
	if err != nil {
		return false, err
	}
	l := g.list(p)
	i := slices.Index(*l, pattern)
	if i < 0 {
		return false, nil
	}
	*l = slices.Delete(*l, i, i+1)
	return true, nil
}

// SkipTOMLString returns the index of the last byte of the string opening at
// src[i] (a quote), and the line it ends on. A string left open ends at the
// end of its line (single-line) or of src (multi-line): the parser refuses it.
// The nesting guards of the config file and of the users file scan with it.
func SkipTOMLString(src string, i, line int) (int, int) {
	q := src[i]
	triple := string([]byte{q, q, q})
	if strings.HasPrefix(src[i:], triple) {
		for j := i + 3; j < len(src); j++ {
			switch {
			case src[j] == '\n':
				line++
			case q == '"' && src[j] == '\\':
				j++ // an escape: the next byte cannot close the string
				if j < len(src) && src[j] == '\n' {
					line++
				}
			case strings.HasPrefix(src[j:], triple):
				j += 2
				// Up to two more quotes belong to the string ("a""""").
				for k := 0; k < 2 && j+1 < len(src) && src[j+1] == q; k++ {
					j++
				}
				return j, line
			}
		}
		return len(src) - 1, line
	}
	for j := i + 1; j < len(src); j++ {
		switch {
		case src[j] == '\n':
			return j - 1, line
		case q == '"' && src[j] == '\\':
			if j+1 < len(src) && src[j+1] == '\n' {
				return j, line
			}
			j++
		case src[j] == q:
			return j, line
		}
	}
	return len(src) - 1, line
}
