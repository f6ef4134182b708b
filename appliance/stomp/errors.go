package stomp

import "fmt"

// Error is a protocol violation found while decoding. Its Reason is short and
// fit for the message header of an ERROR frame. Limit names the configured
// limit that was exceeded, or is empty for malformed input.
type Error struct {
	Reason string
	Limit  string
}

func (e *Error) Error() string { return "stomp: " + e.Reason }

func errorf(format string, args ...any) *Error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

func limitErr(limit string, _ int, format string, args ...any) *Error {
	return &Error{Reason: fmt.Sprintf(format, args...), Limit: limit}
}
