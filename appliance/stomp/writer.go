package stomp

import (
	"strconv"
	"strings"
)

// AppendFrame appends the wire form of f for protocol version v to dst.
// Header values are escaped as v requires. A header v cannot carry is left
// out (see Writable): written raw, its bytes would end the line or the frame
// early and let a producer's header forge headers or frames for the peer.
// Any content-length header in f is replaced by the true body length, which
// is always written for frames that carry a body (SEND, MESSAGE, ERROR) so
// that bodies may hold NULs.
func AppendFrame(dst []byte, f *Frame, v string) []byte {
	dst = append(dst, f.Command...)
	dst = append(dst, '\n')
	return AppendFrameRest(dst, f, v)
}

// AppendHeader appends header h of a cmd frame as AppendFrame writes it
// (nothing when v cannot carry it). With AppendFrameRest it lets a frame
// be written as a head of its own headers and a tail shared with other
// frames: cmd, then AppendHeader for each own header, then the tail.
func AppendHeader(dst []byte, cmd, v string, h Header) []byte {
	if h.Key == "content-length" || !Writable(h, v, cmd) {
		return dst
	}
	esc := Escaped(v, cmd)
	dst = appendHeaderText(dst, h.Key, esc, v)
	dst = append(dst, ':')
	dst = appendHeaderText(dst, h.Value, esc, v)
	return append(dst, '\n')
}

// AppendFrameRest appends what follows f's command line in AppendFrame:
// its headers, the content-length, the blank line, the body and the NUL.
func AppendFrameRest(dst []byte, f *Frame, v string) []byte {
	esc := Escaped(v, f.Command)
	for _, h := range f.Headers {
		if h.Key == "content-length" || !Writable(h, v, f.Command) {
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

// Writable reports whether header h of a cmd frame can be written in version
// v exactly as it is. No version can carry a NUL in a header. Where headers
// are not escaped (1.0, and the CONNECT, STOMP and CONNECTED frames of every
// version) a header cannot hold LF or CR, nor its key a colon. STOMP 1.1
// escapes LF and colon but has no escape for CR.
func Writable(h Header, v, cmd string) bool {
	bad := "\x00\n\r"
	switch {
	case Escaped(v, cmd) && v == V12:
		bad = "\x00"
	case Escaped(v, cmd):
		bad = "\x00\r"
	case strings.IndexByte(h.Key, ':') >= 0:
		return false
	}
	return !strings.ContainsAny(h.Key, bad) && !strings.ContainsAny(h.Value, bad)
}

// appendHeaderText appends s, escaped when esc; AppendFrame has checked that
// s holds nothing v cannot carry.
func appendHeaderText(dst []byte, s string, esc bool, v string) []byte {
	if !esc || !strings.ContainsAny(s, "\n\r:\\") {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == ':':
			dst = append(dst, '\\', 'c')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\r' && v == V12:
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
