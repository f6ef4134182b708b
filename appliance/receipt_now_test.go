package appliance_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Tests of the RECEIPTs a journal completion writes itself (sendNow in
// topic_direct.go): the receipt of a connection's last outstanding batch.

// One durable SEND at a time: the RECEIPTs are written by the completion
// (not handed to the connection's writer), and a burst of SENDs gets its
// receipts in order, whichever way each went.
func TestReceiptNow_LoneSendAnsweredByCompletion(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := dialRaw(t, tb)
	c.connect("1.2")
	w0, _ := tb.B.ReceiptsNowForTest()
	const lone = 20
	for i := range lone {
		c.write(fmt.Sprintf("SEND\ndestination:/queue/now\nreceipt:r%d\n\nbody %d\x00", i, i))
		if f := c.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != fmt.Sprint("r", i) || f.Get("message-id") == "" {
			t.Fatalf("SEND %d: got %s %v, want its RECEIPT with a message-id", i, f.Command, f.Headers)
		}
	}
	// Opportunistic: a receipt goes through the writer when the writer
	// holds the socket (TryLock) or the commit was not alone (another
	// batch joined it, an earlier completion was still with the
	// completer), as under a loaded CI machine's race detector (14 of
	// 20 there); none at all means the path is gone.
	if w, _ := tb.B.ReceiptsNowForTest(); w == w0 {
		t.Fatalf("none of %d lone receipts written by the journal's completion, want most", lone)
	} else {
		t.Logf("%d of %d lone receipts written by the journal's completion", w-w0, lone)
	}
	// A burst: most receipts go through the writer; all arrive in order.
	var burst bytes.Buffer
	const n = 500
	for i := range n {
		fmt.Fprintf(&burst, "SEND\ndestination:/queue/now\nreceipt:b%d\n\nbody %d\x00", i, i)
	}
	c.write(burst.String())
	for i := range n {
		if f := c.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != fmt.Sprint("b", i) {
			t.Fatalf("burst: got %s %v, want the RECEIPT of SEND b%d", f.Command, f.Headers, i)
		}
	}
}

// A client whose socket is full (a tiny receive buffer, not reading):
// a lone RECEIPT's write is cut short and its rest goes to the writer,
// the completion does not wait, and once the client reads, every RECEIPT
// arrives whole and in order.
func TestReceiptNow_PartialWriteHandedOver(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 60 * time.Second}
	})
	id := func(i int) string { return fmt.Sprintf("p%d-%s", i, strings.Repeat(string(rune('a'+i%26)), 1500)) }
	// A receipt may go through the writer instead (the completion is
	// opportunistic: see the test above); if one does while the socket is
	// full, the writer holds the socket and no later one can be written
	// by a completion: that attempt starts over on a new connection.
	var c *raw
	sent := 0
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 1; ; attempt++ {
		if attempt > 5 || time.Now().After(deadline) {
			t.Fatalf("no receipt handed over in %d attempts: the client's socket never filled", attempt-1)
		}
		c = dialRawSmall(t, tb)
		c.connect("1.2")
		sent = 0
		handedOver, viaWriter := false, false
		for !handedOver && !viaWriter && sent < 5000 {
			// One at a time (the previous one answered or handed over),
			// so that each is the connection's last outstanding batch.
			w0, h0 := tb.B.ReceiptsNowForTest()
			c.write("SEND\ndestination:/queue/full\nreceipt:" + id(sent) + "\n\nx\x00")
			sent++
			for wait := time.Now().Add(time.Second); ; {
				w, h := tb.B.ReceiptsNowForTest()
				if h > h0 {
					handedOver = true
					break
				}
				if w > w0 {
					break
				}
				if time.Now().After(wait) {
					viaWriter = true
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		if handedOver {
			break
		}
		c.c.Close()
	}
	// The journal is not held by the full socket: another connection's
	// durable SEND is answered at once.
	other := dialRaw(t, tb)
	other.connect("1.2")
	other.write("SEND\ndestination:/queue/other\nreceipt:o\n\nx\x00")
	if f := other.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "o" {
		t.Fatalf("other connection: got %s %v, want its RECEIPT", f.Command, f.Headers)
	}
	c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := range sent {
		f := c.frame()
		if f.Command != stomp.CmdReceipt || f.Get("receipt-id") != id(i) {
			t.Fatalf("got %s with receipt-id %.12q..., want the RECEIPT of SEND %d whole", f.Command, f.Get("receipt-id"), i)
		}
	}
}

// A frame the reader answers itself (here a topic SEND; nothing of the
// connection in the journal): one at a time, its RECEIPT is written by the
// reader (sendOwn), after the MESSAGE the SEND queued for the connection's
// own subscription; a pipelined burst still gets every RECEIPT, in order,
// each after its MESSAGE.
func TestReceiptNow_ReaderAnswersLoneFrame(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := dialRaw(t, tb)
	c.connect("1.2")
	c.write("SUBSCRIBE\nid:0\ndestination:/topic/own\nreceipt:sub\n\n\x00")
	if f := c.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "sub" {
		t.Fatalf("SUBSCRIBE: got %s %v, want its RECEIPT", f.Command, f.Headers)
	}
	w0, _ := tb.B.ReceiptsNowForTest()
	const lone = 20
	for i := range lone {
		c.write(fmt.Sprintf("SEND\ndestination:/topic/own\nreceipt:r%d\n\nbody %d\x00", i, i))
		if f := c.frame(); f.Command != stomp.CmdMessage || string(f.Body) != fmt.Sprint("body ", i) {
			t.Fatalf("SEND %d: got %s %v %q, want its MESSAGE first", i, f.Command, f.Headers, f.Body)
		}
		if f := c.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != fmt.Sprint("r", i) {
			t.Fatalf("SEND %d: got %s %v, want its RECEIPT after the MESSAGE", i, f.Command, f.Headers)
		}
	}
	// Opportunistic as above (the writer may hold the socket, writing the
	// MESSAGE): none at all means the reader never answers itself.
	if w, _ := tb.B.ReceiptsNowForTest(); w == w0 {
		t.Fatalf("none of %d lone topic SEND receipts written by the reader, want most", lone)
	} else {
		t.Logf("%d of %d lone receipts written by the reader", w-w0, lone)
	}
	var burst bytes.Buffer
	const n = 300
	for i := range n {
		fmt.Fprintf(&burst, "SEND\ndestination:/topic/own\nreceipt:b%d\n\nburst %d\x00", i, i)
	}
	c.write(burst.String())
	for i := range n {
		if f := c.frame(); f.Command != stomp.CmdMessage || string(f.Body) != fmt.Sprint("burst ", i) {
			t.Fatalf("burst %d: got %s %v %q, want its MESSAGE", i, f.Command, f.Headers, f.Body)
		}
		if f := c.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != fmt.Sprint("b", i) {
			t.Fatalf("burst %d: got %s %v, want its RECEIPT", i, f.Command, f.Headers)
		}
	}
}
