package appliance

import "errors"

// Sentinel errors.
var (
	ErrClosed       = errors.New("appliance: closed")
	ErrBadDest      = errors.New("appliance: invalid destination")
	ErrQueueFull    = errors.New("appliance: queue full")
	ErrDiskLow      = errors.New("appliance: free disk space below the floor")
	ErrTooManyConns = errors.New("appliance: too many connections")
	errTxAborted    = errors.New("appliance: transaction aborted")
)
