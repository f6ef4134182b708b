package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/herald-mq/herald/multicast"
)

func catchUpPrinter(buf *bytes.Buffer, js bool) *listenPrinter {
	p := &listenPrinter{out: bufio.NewWriter(buf), json: js}
	if js {
		p.enc = json.NewEncoder(p.out)
	}
	return p
}

func streamMsg(topic string, session, seq, off uint64) multicast.Message {
	return multicast.Message{Topic: topic, Session: session, StreamSeq: seq,
		Headers: []multicast.Header{{Key: "x-stream-offset", Value: fmt.Sprint(off)}}, Body: []byte("b")}
}

// A gap on a stream topic prints #CATCHUP after the #GAP line and before
// the next message, with the offsets mapped from sequences by a message
// heard before the gap, or (a receiver that joined late) after it; other
// topics' gaps print nothing more; a new session forgets references.
func TestListen_StreamCatchUp(t *testing.T) {
	var buf bytes.Buffer
	p := catchUpPrinter(&buf, false)
	events := []multicast.Event{
		streamMsg("/stream/s", 1, 10, 110),
		multicast.Gap{Topic: "/stream/s", Session: 1, From: 11, To: 14, Reason: multicast.ReasonExpired},
		streamMsg("/stream/s", 1, 15, 115),
		// Late joiner on another stream: the gap comes before any message.
		multicast.Gap{Topic: "/stream/late", Session: 1, From: 1, To: 2, Reason: multicast.ReasonExpired},
		streamMsg("/stream/late", 1, 3, 52),
		multicast.Gap{Topic: "plain.topic", Session: 1, From: 3, To: 4, Reason: multicast.ReasonExpired},
		multicast.SessionChange{Old: 1, New: 2},
		// A gap of the new session is not mapped by the old reference.
		multicast.Gap{Topic: "/stream/s", Session: 2, From: 1, To: 1, Reason: multicast.ReasonExpired},
		multicast.Message{Topic: "plain.topic", Session: 2, StreamSeq: 5, Body: []byte("x")},
	}
	for _, e := range events {
		if err := p.print(e); err != nil {
			t.Fatal(err)
		}
	}
	p.out.Flush()
	want := "/stream/s\tb\n" +
		"#GAP\t/stream/s\t11-14\texpired\n" +
		"#CATCHUP\t/stream/s\t111-114\therald receive /stream/s --offset 111 --count 4\n" +
		"/stream/s\tb\n" +
		"#GAP\t/stream/late\t1-2\texpired\n" +
		"#CATCHUP\t/stream/late\t50-51\therald receive /stream/late --offset 50 --count 2\n" +
		"/stream/late\tb\n" +
		"#GAP\tplain.topic\t3-4\texpired\n"
	got := buf.String()
	if !strings.HasPrefix(got, want) {
		t.Errorf("printed:\n%s\nwant it to start with:\n%s", got, want)
	}
	if strings.Count(got, "#CATCHUP") != 2 {
		t.Errorf("printed %d catch-up lines, want 2 (none for a plain topic or across sessions):\n%s", strings.Count(got, "#CATCHUP"), got)
	}

	buf.Reset()
	p = catchUpPrinter(&buf, true)
	for _, e := range events[:3] {
		p.print(e)
	}
	p.out.Flush()
	if !strings.Contains(buf.String(), `{"catchup":{"stream":"s","from":111,"to":114,"command":"herald receive /stream/s --offset 111 --count 4"}}`) {
		t.Errorf("--json: %s", buf.String())
	}
}

// FuzzStreamCatchUp drives the catch-up mapping with events from fuzz
// input (a hostile sender picks sequences, offsets and gaps): no panic,
// and every printed range is from <= to with the matching count.
func FuzzStreamCatchUp(f *testing.F) {
	f.Add([]byte{0, 1, 10, 110, 1, 1, 11, 14, 0, 1, 15, 115})
	f.Add([]byte{1, 1, 0, 255, 0, 1, 255, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf bytes.Buffer
		p := catchUpPrinter(&buf, false)
		for len(data) >= 4 {
			kind, session := data[0]%3, uint64(data[1]%2)
			a, b := uint64(data[2]), uint64(data[3])
			data = data[4:]
			if len(data) >= 8 && data[0]&1 == 1 {
				a = binary.BigEndian.Uint64(data)
				data = data[8:]
			}
			switch kind {
			case 0:
				p.print(streamMsg("/stream/f", session, a, b))
			case 1:
				p.print(multicast.Gap{Topic: "/stream/f", Session: session, From: a, To: b})
			case 2:
				p.print(multicast.SessionChange{Old: session, New: session + 1})
			}
		}
		p.out.Flush()
		for _, line := range strings.Split(buf.String(), "\n") {
			if !strings.HasPrefix(line, "#CATCHUP") {
				continue
			}
			var from, to, count uint64
			f := strings.Split(line, "\t")
			if len(f) != 4 {
				t.Fatalf("line %q", line)
			}
			if _, err := fmt.Sscanf(f[2], "%d-%d", &from, &to); err != nil || from > to {
				t.Fatalf("range in %q", line)
			}
			if _, err := fmt.Sscanf(f[3], "herald receive /stream/f --offset %d --count %d", &from, &count); err != nil || count != to-from+1 {
				t.Fatalf("command in %q", line)
			}
		}
	})
}

// Within one session the sender forgets a stream topic idle for stream_idle (10 min) and its
// next append starts a new stream id at stream sequence 1 (protocol section 3, "Catalog"). A
// tail gap of the new stream id must not be mapped to offsets with the old stream id's
// reference: the reference is kept per (session, stream id). Before, it was kept per topic, and
// #CATCHUP named the wrong offsets (the user read back old appends, believing them the lost
// ones).
func TestListen_CatchUpReferencePerStreamID(t *testing.T) {
	var buf bytes.Buffer
	p := catchUpPrinter(&buf, false)
	old := streamMsg("/stream/s", 1, 100, 99) // stream id 1: offset = seq - 1
	old.Stream = 1
	events := []multicast.Event{
		old,
		// 10 minutes idle: the sender forgot stream 1; offsets 100..102 went as stream id 2,
		// sequences 1..3, all lost (a tail gap announced by a heartbeat).
		multicast.Gap{Topic: "/stream/s", Stream: 2, Session: 1, From: 1, To: 3, Reason: multicast.ReasonExpired},
		multicast.Message{Topic: "plain.topic", Stream: 3, Session: 1, StreamSeq: 7, Body: []byte("x")},
	}
	for _, e := range events {
		if err := p.print(e); err != nil {
			t.Fatal(err)
		}
	}
	p.out.Flush()
	got := buf.String()
	if strings.Contains(got, "#CATCHUP") && !strings.Contains(got, "--offset 100 --count 3") {
		t.Errorf("catch-up for offsets 100-102 (stream id 2, sequences 1-3) names other offsets:\n%s", got)
	}
}
