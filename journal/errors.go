package journal

import "errors"

// Sentinel errors.
var (
	ErrClosed = errors.New("journal: closed")
	// ErrNotFlushed: Close's context ended before everything submitted
	// was committed.
	ErrNotFlushed = errors.New("journal: did not flush in time")
)
