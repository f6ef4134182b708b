package stomp

import (
	"strconv"
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
	if h.Key == "content-length" {
		return dst
	}
	return appendHeader(dst, h, Escaped(v, cmd), v)
}

// AppendFrameRest appends what follows f's command line in AppendFrame:
// its headers, the content-length, the blank line, the body and the NUL.
func AppendFrameRest(dst []byte, f *Frame, v string) []byte {
	esc := Escaped(v, f.Command)
	for _, h := range f.Headers {
		if h.Key == "content-length" {
			continue
		}
		dst = appendHeader(dst, h, esc, v)
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
	return writable(classes(h.Key), classes(h.Value), Escaped(v, cmd), v)
}

// Octet classes that matter to a header line: a table lookup per octet
// instead of strings.ContainsAny, whose search for several characters in
// a short string costs a call per octet (it was a tenth of heraldd's CPU
// in a topic fan-out profile).
const (
	clNUL uint8 = 1 << iota
	clLF
	clCR
	clColon
	clBackslash
)

var octetClass = [256]uint8{0: clNUL, '\n': clLF, '\r': clCR, ':': clColon, '\\': clBackslash}

// classes is the union of the classes of s's octets.
func classes(s string) uint8 {
	var m uint8
	for i := 0; i < len(s); i++ {
		m |= octetClass[s[i]]
	}
	return m
}

// writable is Writable from the classes of a header's key (k) and value
// (val): no NUL anywhere; unescaped, no LF or CR and no colon in the key;
// STOMP 1.1 escapes LF and colon but has no escape for CR.
func writable(k, val uint8, esc bool, v string) bool {
	switch {
	case esc && v == V12:
		return (k|val)&clNUL == 0
	case esc:
		return (k|val)&(clNUL|clCR) == 0
	}
	return k&clColon == 0 && (k|val)&(clNUL|clLF|clCR) == 0
}

// appendHeader appends "key:value\n", escaped when esc, or nothing when v
// cannot carry h (see Writable).
func appendHeader(dst []byte, h Header, esc bool, v string) []byte {
	k, val := classes(h.Key), classes(h.Value)
	if !writable(k, val, esc, v) {
		return dst
	}
	const special = clLF | clCR | clColon | clBackslash
	if esc && k&special != 0 {
		dst = appendEscaped(dst, h.Key, v)
	} else {
		dst = append(dst, h.Key...)
	}
	dst = append(dst, ':')
	if esc && val&special != 0 {
		dst = appendEscaped(dst, h.Value, v)
	} else {
		dst = append(dst, h.Value...)
	}
	return append(dst, '\n')
}

// appendEscaped appends s with the escapes of v (1.1 or 1.2); appendHeader
// has checked that s holds nothing v cannot carry.
func appendEscaped(dst []byte, s string, v string) []byte {
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
