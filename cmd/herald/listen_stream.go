package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/herald-mq/herald/multicast"
)

// Catching up on a stream after a multicast gap. A channel carrying
// streams (streams = [...] in heraldd's [[multicast.channel]]) sends each
// append as a message of topic "/stream/NAME" with its x-stream-offset.
// Within a sender session a stream's multicast sequence numbers follow its
// offsets one for one, so a gap of sequences From..To maps to offsets,
// knowing one message of the same stream and session (before or after the
// gap). herald listen then prints, after the #GAP line and before the next
// message, how to read what was lost over STOMP:
//
//	#CATCHUP<TAB>/stream/NAME<TAB>from-to<TAB>herald receive /stream/NAME --offset FROM --count N
//
// (with --json: {"catchup":{"stream","from","to","command"}}).

// catchUpState is one listen's: each stream's reference (a sequence and its
// offset) and the gaps waiting for one.
type catchUpState struct {
	refs    map[refKey]seqOffset
	pending []multicast.Gap
}

// refKey names the stream a reference holds for: sequences follow offsets
// one for one only within one stream id of one session. The sender forgets
// a stream topic idle for stream_idle and its next append starts a new
// stream id at sequence 1, so a reference of the topic's old stream id
// says nothing of the new one.
type refKey struct {
	session uint64
	stream  uint32
	topic   string
}

type seqOffset struct {
	seq, off uint64
}

// Bounds: a listener hears at most this many stream topics' references and
// holds this many gaps waiting for one (the oldest dropped beyond).
const (
	maxCatchUpRefs    = 10000
	maxCatchUpPending = 1000
)

var (
	// catchUpPending counts the gaps waiting for a reference, over all
	// listens of the process.
	catchUpPending atomic.Int64
	catchUpMu      sync.Mutex
	catchUpStates  = map[*listenPrinter]*catchUpState{}
)

func catchUpFor(p *listenPrinter) *catchUpState {
	catchUpMu.Lock()
	defer catchUpMu.Unlock()
	st := catchUpStates[p]
	if st == nil {
		st = &catchUpState{refs: map[refKey]seqOffset{}}
		catchUpStates[p] = st
	}
	return st
}

// streamCatchUp is called by listen for every event before it is printed:
// it learns stream offsets from messages, and prints the catch-up command
// of each stream gap once it can tell its offsets.
func streamCatchUp(p *listenPrinter, e multicast.Event) error {
	// The fast path of every plain topic's message: no lock, no map.
	switch e := e.(type) {
	case multicast.Message:
		if !strings.HasPrefix(e.Topic, "/stream/") && catchUpPending.Load() == 0 {
			return nil
		}
	case multicast.Gap:
		if !strings.HasPrefix(e.Topic, "/stream/") {
			return nil
		}
	}
	st := catchUpFor(p)
	switch e := e.(type) {
	case multicast.Message:
		if strings.HasPrefix(e.Topic, "/stream/") {
			for _, h := range e.Headers {
				if h.Key == "x-stream-offset" {
					if off, err := strconv.ParseUint(h.Value, 10, 64); err == nil {
						if len(st.refs) >= maxCatchUpRefs {
							clear(st.refs)
						}
						st.refs[refKey{e.Session, e.Stream, e.Topic}] = seqOffset{e.StreamSeq, off}
					}
					break
				}
			}
		}
	case multicast.Gap:
		if strings.HasPrefix(e.Topic, "/stream/") && e.To >= e.From {
			if len(st.pending) >= maxCatchUpPending {
				st.pending = st.pending[1:]
				catchUpPending.Add(-1)
			}
			st.pending = append(st.pending, e)
			catchUpPending.Add(1)
		}
		return nil // printed after the #GAP line
	case multicast.SessionChange:
		clear(st.refs) // sequences start again
	}
	keep := st.pending[:0]
	var err error
	for _, g := range st.pending {
		r, ok := st.refs[refKey{g.Session, g.Stream, g.Topic}]
		if !ok {
			keep = append(keep, g)
			continue
		}
		// offset(seq) = r.off + seq - r.seq, in signed arithmetic.
		from := int64(r.off) + int64(g.From) - int64(r.seq)
		if from < 0 {
			continue // not one for one: nothing sensible to say
		}
		n := g.To - g.From + 1
		if n == 0 || uint64(from)+n < uint64(from) {
			continue // a range no stream holds (from a hostile sender)
		}
		if err == nil {
			err = printCatchUp(p, strings.TrimPrefix(g.Topic, "/stream/"), uint64(from), uint64(from)+n-1)
		}
	}
	catchUpPending.Add(int64(len(keep) - len(st.pending)))
	st.pending = keep
	return err
}

func printCatchUp(p *listenPrinter, name string, from, to uint64) error {
	cmd := fmt.Sprintf("herald receive /stream/%s --offset %d --count %d", name, from, to-from+1)
	var err error
	if p.json {
		var c struct {
			CatchUp struct {
				Stream  string `json:"stream"`
				From    uint64 `json:"from"`
				To      uint64 `json:"to"`
				Command string `json:"command"`
			} `json:"catchup"`
		}
		c.CatchUp.Stream, c.CatchUp.From, c.CatchUp.To, c.CatchUp.Command = name, from, to, cmd
		err = p.enc.Encode(&c)
	} else {
		_, err = fmt.Fprintf(p.out, "#CATCHUP\t/stream/%s\t%d-%d\t%s\n", name, from, to, cmd)
	}
	if err != nil {
		return stdoutErr(err)
	}
	return nil
}
