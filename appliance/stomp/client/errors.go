package client

import (
	"errors"
	"strings"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Errors reported by a Conn.
var (
	// ErrClosed: the connection was closed by Close or Disconnect.
	ErrClosed = errors.New("stomp client: connection closed")
	// ErrConnectionLost: the server closed the connection without an ERROR frame.
	ErrConnectionLost = errors.New("stomp client: server closed the connection")
	// ErrHeartbeatTimeout: nothing arrived within twice the server's heart-beat interval.
	ErrHeartbeatTimeout = errors.New("stomp client: server heart-beat missed")
	// ErrNoAck: Ack or Nack of a MESSAGE frame that carries nothing to acknowledge it with.
	ErrNoAck = errors.New("stomp client: message has no ack or message-id header")
)

// ServerError is an ERROR frame sent by the server.
type ServerError struct {
	Frame *stomp.Frame
}

// Error returns the frame's message header, followed by its body when it has one.
func (e *ServerError) Error() string {
	var b strings.Builder
	b.WriteString("stomp server error")
	if m := e.Frame.Get("message"); m != "" {
		b.WriteString(": ")
		b.WriteString(m)
	}
	if body := strings.TrimSpace(string(e.Frame.Body)); body != "" {
		const max = 512
		if len(body) > max {
			body = body[:max] + "..."
		}
		b.WriteString(": ")
		b.WriteString(body)
	}
	return b.String()
}
