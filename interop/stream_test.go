package interop_test

import (
	"strconv"
	"testing"
	"time"
)

type pyStreamResult struct {
	Messages []struct {
		Offset    string `json:"offset"`
		Timestamp string `json:"timestamp"`
		Body      string `json:"body"`
	} `json:"messages"`
	Errors []struct {
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	} `json:"errors"`
	Receipts []string `json:"receipts"`
}

// stomp.py reads a stream with RabbitMQ's header names (x-stream-offset,
// x-stream-consumer, ack:client) and resumes from its durable cursor
// after a disconnect and after a broker restart.
func TestStompPy_StreamCursorResumes(t *testing.T) {
	py := stompPython(t)
	tb := startBroker(t, nil)
	appendStream := func(from, n int) {
		c := tb.dial(t)
		for i := from; i < from+n; i++ {
			r, err := c.SendReceipt(ctxT(t), "/stream/stats", []byte("m"+strconv.Itoa(i)))
			if err != nil || r.Get("x-stream-offset") != strconv.Itoa(i) {
				t.Fatalf("append %d: %v %v", i, r, err)
			}
		}
		c.Close()
	}
	run := func(consumer, offset string, count, ack int, want ...int) {
		t.Helper()
		var res pyStreamResult
		runJSON(t, 30*time.Second, &res, py, "-u", testdata(t, "stomppy_stream.py"), tb.Addr, "/stream/stats", consumer, offset, strconv.Itoa(count), strconv.Itoa(ack))
		if len(res.Errors) > 0 {
			t.Fatalf("stomp.py got ERROR frames: %+v", res.Errors)
		}
		if len(res.Messages) != len(want) {
			t.Fatalf("stomp.py received %d messages %+v, want offsets %v", len(res.Messages), res.Messages, want)
		}
		for i, w := range want {
			m := res.Messages[i]
			ts, err := strconv.ParseInt(m.Timestamp, 10, 64)
			if m.Offset != strconv.Itoa(w) || m.Body != "m"+strconv.Itoa(w) || err != nil || time.Since(time.UnixMilli(ts)) > time.Minute {
				t.Fatalf("message %d: %+v, want offset %d body m%d and a timestamp in ms", i, m, w, w)
			}
		}
		// stomp.py's DISCONNECT asks for a receipt of its own.
		if ack >= 0 && (len(res.Receipts) == 0 || res.Receipts[0] != "ack") {
			t.Fatalf("ACK receipt: %v, want the ACK's first", res.Receipts)
		}
	}
	appendStream(0, 10)
	run("py-worker", "first", 5, 4, 0, 1, 2, 3, 4) // ACK of 4 acknowledges 0..4
	run("py-worker", "first", 5, 9, 5, 6, 7, 8, 9) // resumes after 4, whatever x-stream-offset says
	run("-", "offset=7", 3, -1, 7, 8, 9)           // no cursor: from the offset given
	tb.Restart()
	appendStream(10, 3)
	run("py-worker", "first", 3, 12, 10, 11, 12) // the cursor survived the restart
}
