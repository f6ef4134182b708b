package journal

import (
	"encoding/binary"
	"errors"

	"github.com/herald-mq/herald/appliance/headers"
)

var errBadHeaders = errors.New("journal: corrupt header blob")

// encodeHeaders stores headers as uvarint count, then uvarint-length-prefixed
// keys and values.
func encodeHeaders(dst []byte, h headers.Headers) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(h)))
	for _, kv := range h {
		dst = binary.AppendUvarint(dst, uint64(len(kv.Key)))
		dst = append(dst, kv.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(kv.Value)))
		dst = append(dst, kv.Value...)
	}
	return dst
}

func decodeHeaders(b []byte) (headers.Headers, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBadHeaders
	}
	b = b[k:]
	h := make(headers.Headers, 0, n)
	str := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	for i := uint64(0); i < n; i++ {
		key, ok1 := str()
		val, ok2 := str()
		if !ok1 || !ok2 {
			return nil, errBadHeaders
		}
		h = append(h, headers.Header{Key: key, Value: val})
	}
	return h, nil
}
