package appliance

import "errors"

// Sentinel errors.
var (
	ErrClosed    = errors.New("appliance: closed")
	ErrBadDest   = errors.New("appliance: invalid destination")
	errTxAborted = errors.New("appliance: transaction aborted")
)
