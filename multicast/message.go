package multicast

import (
	"encoding/binary"
	"fmt"
)

// Header is one key/value pair carried with a message, as in a STOMP frame.
type Header struct {
	Key   string
	Value string
}

// AppendMessage appends the record payload encoding of a message to dst:
//
//	u16 header count, then per header: u16 key length, key, u16 value length, value;
//	then the body, which runs to the end of the payload.
//
// The topic is not part of the payload; it is named by the record's stream id (see CATALOG).
func AppendMessage(dst []byte, headers []Header, body []byte) ([]byte, error) {
	if len(headers) > 0xffff {
		return dst, fmt.Errorf("%d headers: %w", len(headers), ErrTooLarge)
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(headers)))
	for _, h := range headers {
		if len(h.Key) > 0xffff || len(h.Value) > 0xffff {
			return dst, fmt.Errorf("header %.32q: %w", h.Key, ErrTooLarge)
		}
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return append(dst, body...), nil
}

// MessageSize is the encoded size of a message payload.
func MessageSize(headers []Header, body []byte) int {
	n := 2 + len(body)
	for _, h := range headers {
		n += 4 + len(h.Key) + len(h.Value)
	}
	return n
}

// DecodeMessage splits a record payload into headers and body. The body aliases p;
// header strings are copies.
func DecodeMessage(p []byte) (headers []Header, body []byte, err error) {
	if len(p) < 2 {
		return nil, nil, fmt.Errorf("message payload: %w", ErrShort)
	}
	n := int(binary.LittleEndian.Uint16(p))
	p = p[2:]
	if n > len(p)/4 {
		return nil, nil, fmt.Errorf("message with %d headers in %d bytes: %w", n, len(p), ErrMalformed)
	}
	if n > 0 {
		headers = make([]Header, 0, n)
	}
	for i := 0; i < n; i++ {
		var k, v string
		var ok bool
		if k, p, ok = lenString(p); !ok {
			return nil, nil, fmt.Errorf("header %d key: %w", i, ErrMalformed)
		}
		if v, p, ok = lenString(p); !ok {
			return nil, nil, fmt.Errorf("header %d value: %w", i, ErrMalformed)
		}
		headers = append(headers, Header{Key: k, Value: v})
	}
	return headers, p, nil
}

func lenString(p []byte) (string, []byte, bool) {
	if len(p) < 2 {
		return "", p, false
	}
	l := int(binary.LittleEndian.Uint16(p))
	if len(p) < 2+l {
		return "", p, false
	}
	return string(p[2 : 2+l]), p[2+l:], true
}
