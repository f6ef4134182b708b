package lockcore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Owner is one request for a lock (the shell's subscription).
type Owner uint64

// Grant passes a lock to an owner with a new fencing token.
type Grant struct {
	Name  string
	Owner Owner
	Token uint64
}

// Limits bound the lock table.
type Limits struct {
	MaxNames   int // lock names known (each keeps its last token)
	MaxWaiters int // owners waiting for one lock
}

// Errors of Acquire.
var (
	ErrTooManyNames   = errors.New("lock: too many lock names")
	ErrTooManyWaiters = errors.New("lock: too many waiters for this lock")
	ErrDuplicate      = errors.New("lock: this owner already holds or waits for the lock")
)

type lock struct {
	token  uint64 // last token given (or recovered)
	held   bool
	holder Owner
	queue  []Owner // waiters, longest first
}

// Core is the lock table. Not safe for concurrent use.
type Core struct {
	locks map[string]*lock
}

// New returns an empty lock table.
func New() *Core { return &Core{locks: map[string]*lock{}} }

// Recover restores a lock's last journaled token at startup (no holder:
// the connections that held locks are gone).
func (c *Core) Recover(name string, token uint64) {
	l := c.locks[name]
	if l == nil {
		l = &lock{}
		c.locks[name] = l
	}
	l.token = max(l.token, token)
}

// Acquire asks for lock name for o: a Grant when the lock is free and no
// one waits, otherwise o waits its turn (nil, nil).
func (c *Core) Acquire(name string, o Owner, lim Limits) (*Grant, error) {
	l := c.locks[name]
	if l == nil {
		if len(c.locks) >= lim.MaxNames {
			return nil, ErrTooManyNames
		}
		l = &lock{}
		c.locks[name] = l
	}
	if l.held && l.holder == o {
		return nil, ErrDuplicate
	}
	for _, w := range l.queue {
		if w == o {
			return nil, ErrDuplicate
		}
	}
	if !l.held {
		return c.grant(name, l, o), nil
	}
	if len(l.queue) >= lim.MaxWaiters {
		return nil, ErrTooManyWaiters
	}
	l.queue = append(l.queue, o)
	return nil, nil
}

func (c *Core) grant(name string, l *lock, o Owner) *Grant {
	l.token++
	l.held, l.holder = true, o
	return &Grant{Name: name, Owner: o, Token: l.token}
}

// Release gives up o's hold on (or place in the queue of) lock name. When
// o held it and someone waits, the longest waiter gets it: its Grant is
// returned. Unknown names and owners are ignored.
func (c *Core) Release(name string, o Owner) *Grant {
	l := c.locks[name]
	if l == nil {
		return nil
	}
	if l.held && l.holder == o {
		l.held = false
		if len(l.queue) == 0 {
			return nil
		}
		next := l.queue[0]
		l.queue = l.queue[1:]
		return c.grant(name, l, next)
	}
	for i, w := range l.queue {
		if w == o {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			break
		}
	}
	return nil
}

// Holder returns the holder of lock name and its token; held is false
// when the lock is free (token is then the last one given).
func (c *Core) Holder(name string) (o Owner, token uint64, held bool) {
	l := c.locks[name]
	if l == nil {
		return 0, 0, false
	}
	return l.holder, l.token, l.held
}

// Waiters returns the owners waiting for lock name, longest first.
func (c *Core) Waiters(name string) []Owner {
	if l := c.locks[name]; l != nil {
		return append([]Owner(nil), l.queue...)
	}
	return nil
}

// Names is the number of lock names known.
func (c *Core) Names() int { return len(c.locks) }

// Fence checks a fenced write: it may proceed only while token is the
// token of lock name's current holder. Otherwise the error says why.
func (c *Core) Fence(name string, token uint64) error {
	_, cur, held := c.Holder(name)
	switch {
	case held && cur == token:
		return nil
	case cur > token && held:
		return fmt.Errorf("lock %s is held with token %d; token %d is stale", name, cur, token)
	case cur > token:
		return fmt.Errorf("lock %s is free; its last token was %d, so token %d is stale", name, cur, token)
	case held:
		return fmt.Errorf("lock %s is held with token %d; token %d was never given", name, cur, token)
	}
	return fmt.Errorf("lock %s is free and token %d was never given (last: %d)", name, token, cur)
}

// MaxNameBytes bounds a lock name.
const MaxNameBytes = 255

// ParseFence parses an if-fence header, NAME:TOKEN (the last colon
// separates: NAME is the lock's name without /lock/, TOKEN the lock-token
// the holder was given).
func ParseFence(v string) (name string, token uint64, err error) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 || i == len(v)-1 {
		return "", 0, fmt.Errorf("if-fence must be LOCKNAME:TOKEN (the lock-token of the lock's MESSAGE); got %q.", v)
	}
	name = v[:i]
	if err := CheckName(name); err != nil {
		return "", 0, fmt.Errorf("if-fence %q: %v.", v, err)
	}
	token, perr := strconv.ParseUint(v[i+1:], 10, 64)
	if perr != nil || token == 0 {
		return "", 0, fmt.Errorf("if-fence %q: the token must be a number from 1 (the lock-token of the lock's MESSAGE).", v)
	}
	return name, token, nil
}

// CheckName checks a lock name: 1 to 255 bytes of printable characters
// without wildcards (* and >), dot-separated segments that are not empty.
func CheckName(n string) error {
	if n == "" || len(n) > MaxNameBytes {
		return fmt.Errorf("a lock name is 1 to %d bytes", MaxNameBytes)
	}
	for _, r := range n {
		if r < 0x20 || r == 0x7f || r == 0xfffd || r == '*' || r == '>' {
			return fmt.Errorf("lock name %q: no control characters, invalid UTF-8 or wildcards", n)
		}
	}
	for _, seg := range strings.Split(n, ".") {
		if seg == "" {
			return fmt.Errorf("lock name %q: empty segment between dots", n)
		}
	}
	return nil
}
