package stomp

import (
	"strconv"
)

// Commands of STOMP 1.2 (and the 1.0/1.1 subset).
const (
	CmdConnect     = "CONNECT"
	CmdStomp       = "STOMP"
	CmdConnected   = "CONNECTED"
	CmdSend        = "SEND"
	CmdSubscribe   = "SUBSCRIBE"
	CmdUnsubscribe = "UNSUBSCRIBE"
	CmdAck         = "ACK"
	CmdNack        = "NACK"
	CmdBegin       = "BEGIN"
	CmdCommit      = "COMMIT"
	CmdAbort       = "ABORT"
	CmdDisconnect  = "DISCONNECT"
	CmdMessage     = "MESSAGE"
	CmdReceipt     = "RECEIPT"
	CmdError       = "ERROR"
)

// Protocol versions.
const (
	V10 = "1.0"
	V11 = "1.1"
	V12 = "1.2"
)

// ClientCommand reports whether cmd is a frame a client may send.
func ClientCommand(cmd string) bool {
	switch cmd {
	case CmdConnect, CmdStomp, CmdSend, CmdSubscribe, CmdUnsubscribe, CmdAck, CmdNack,
		CmdBegin, CmdCommit, CmdAbort, CmdDisconnect:
		return true
	}
	return false
}

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

// Frame is one STOMP frame.
type Frame struct {
	Command string
	Headers Headers
	Body    []byte
}

// NewFrame builds a frame from a command and key/value pairs.
func NewFrame(cmd string, kv ...string) *Frame {
	f := &Frame{Command: cmd}
	for i := 0; i+1 < len(kv); i += 2 {
		f.Headers = append(f.Headers, Header{kv[i], kv[i+1]})
	}
	return f
}

// Get returns the first value of header key.
func (f *Frame) Get(key string) string { return f.Headers.Get(key) }

// ContentLength parses the content-length header: -1 when absent.
func (f *Frame) ContentLength() (int, error) {
	v, ok := f.Headers.Lookup("content-length")
	if !ok {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, errorf("invalid content-length %q", v)
	}
	return n, nil
}

// Escaped reports whether header values of cmd are escaped in version v.
func Escaped(v, cmd string) bool {
	if v == V10 || v == "" {
		return false
	}
	return cmd != CmdConnect && cmd != CmdStomp && cmd != CmdConnected
}
