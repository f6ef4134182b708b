package stomp

import (
	"strconv"

	"github.com/herald-mq/herald/appliance/headers"
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

// Header is one header line; Headers an ordered list of them (the first of
// repeated headers wins). They are package headers' types, shared with the
// journal, which stores message headers without knowing STOMP.
type (
	Header  = headers.Header
	Headers = headers.Headers
)

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
		f.Headers = append(f.Headers, Header{Key: kv[i], Value: kv[i+1]})
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
