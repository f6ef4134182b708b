// Package headers is the ordered header list of a message: what STOMP
// frames carry and what the journal stores. It knows no protocol.
package headers

// Header is one header line. Order is significant: the first of repeated
// headers wins.
type Header struct {
	Key, Value string
}

// Headers is an ordered header list.
type Headers []Header

// Get returns the value of the first header named key.
func (h Headers) Get(key string) string {
	v, _ := h.Lookup(key)
	return v
}

// Lookup returns the value of the first header named key and whether it is present.
func (h Headers) Lookup(key string) (string, bool) {
	for _, kv := range h {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// Set replaces every header named key with one holding value (appended if absent).
func (h *Headers) Set(key, value string) {
	out := (*h)[:0]
	done := false
	for _, kv := range *h {
		if kv.Key == key {
			if done {
				continue
			}
			kv.Value = value
			done = true
		}
		out = append(out, kv)
	}
	if !done {
		out = append(out, Header{key, value})
	}
	*h = out
}

// Add appends a header.
func (h *Headers) Add(key, value string) { *h = append(*h, Header{key, value}) }

// Del removes every header named key.
func (h *Headers) Del(key string) {
	out := (*h)[:0]
	for _, kv := range *h {
		if kv.Key != key {
			out = append(out, kv)
		}
	}
	*h = out
}

// Clone returns a copy that shares no storage with h.
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	return append(Headers(nil), h...)
}
