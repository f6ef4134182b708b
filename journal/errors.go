package journal

import "errors"

// Sentinel errors.
var (
	ErrClosed = errors.New("journal: closed")
)
