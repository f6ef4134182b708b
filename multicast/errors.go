package multicast

import "errors"

// Sentinel errors. Wrap them with context; compare with errors.Is.
var (
	ErrShort       = errors.New("multicast: datagram too short")
	ErrMagic       = errors.New("multicast: bad magic")
	ErrVersion     = errors.New("multicast: unsupported protocol version")
	ErrType        = errors.New("multicast: unknown datagram type")
	ErrMalformed   = errors.New("multicast: malformed datagram")
	ErrTooLarge    = errors.New("multicast: message larger than the largest datagram")
	ErrAuth        = errors.New("multicast: datagram failed authentication")
	ErrClosed      = errors.New("multicast: closed")
	ErrNotOpen     = errors.New("multicast: not open")
	ErrBadConfig   = errors.New("multicast: invalid config")
	ErrEmptyTopic  = errors.New("multicast: empty topic")
	ErrAlreadyOpen = errors.New("multicast: already open")
)
