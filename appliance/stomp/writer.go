package stomp

import (
	"strconv"
	"strings"
)

// AppendFrame appends the wire form of f for protocol version v to dst.
// Header values are escaped as v requires. Any content-length header in f is
// replaced by the true body length, which is always written for frames that
// carry a body (SEND, MESSAGE, ERROR) so that bodies may hold NULs.
func AppendFrame(dst []byte, f *Frame, v string) []byte {
	dst = append(dst, f.Command...)
	dst = append(dst, '\n')
	esc := Escaped(v, f.Command)
	for _, h := range f.Headers {
		if h.Key == "content-length" {
			continue
		}
		dst = appendHeaderText(dst, h.Key, esc, v)
		dst = append(dst, ':')
		dst = appendHeaderText(dst, h.Value, esc, v)
		dst = append(dst, '\n')
	}
	if len(f.Body) > 0 || f.Command == CmdSend || f.Command == CmdMessage || f.Command == CmdError {
		dst = append(dst, "content-length:"...)
		dst = strconv.AppendInt(dst, int64(len(f.Body)), 10)
		dst = append(dst, '\n')
	}
	dst = append(dst, '\n')
	dst = append(dst, f.Body...)
	return append(dst, 0)
}

// Encode returns the wire form of f (see AppendFrame).
func Encode(f *Frame, v string) []byte { return AppendFrame(nil, f, v) }

func appendHeaderText(dst []byte, s string, esc bool, v string) []byte {
	if !strings.ContainsAny(s, "\n\r:\\") {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case !esc && (c == '\n' || c == '\r'):
			// 1.0 and CONNECT-family frames cannot carry EOLs in a value.
			dst = append(dst, ' ')
		case !esc:
			dst = append(dst, c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == ':':
			dst = append(dst, '\\', 'c')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\r' && v == V12:
			dst = append(dst, '\\', 'r')
		case c == '\r':
			dst = append(dst, ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
