package multicast

import "fmt"

// Event is what a receiver hands to the application: a Message, a Gap or a SessionChange.
type Event interface{ isEvent() }

// Message is one delivered message.
type Message struct {
	Topic     string
	Stream    uint32
	StreamSeq uint64
	Headers   []Header
	Body      []byte
	Repaired  bool // it arrived in a repair (RDATA); in Skip mode it may be out of order
	Session   uint64
}

// Gap reports stream sequences From..To (inclusive) of Topic that will never be delivered. In
// Ordered mode it comes before the next message of the stream.
type Gap struct {
	Topic    string
	Stream   uint32
	From, To uint64
	Reason   Reason
	Session  uint64
}

// SessionChange reports that the sender restarted (a new session id). Stream sequences start again.
// Old is 0 on the first session heard.
type SessionChange struct {
	Old, New uint64
}

func (Message) isEvent()       {}
func (Gap) isEvent()           {}
func (SessionChange) isEvent() {}

func (g Gap) String() string {
	return fmt.Sprintf("gap %s stream %d seq %d-%d (%v)", g.Topic, g.Stream, g.From, g.To, g.Reason)
}
