package appliance

import "context"

// LockToken is an advisory lock's last fencing token, as the journal
// stores it (OpLock).
type LockToken struct {
	Name  string
	Token uint64
}

// LockJournal is the part of a journal that keeps the fencing tokens of
// advisory locks (/lock/NAME), so that they never go back across
// restarts. A journal without it has no locks: SUBSCRIBE to /lock/ is
// refused.
type LockJournal interface {
	// LockLoad calls fn, at startup, with every lock's last token.
	LockLoad(ctx context.Context, fn func(t LockToken) error) error
}
