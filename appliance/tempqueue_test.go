package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

func TestTempQueue_RequestReply(t *testing.T) {
	tb := mustStartBroker(t, nil)
	// A responder serving /queue/rpc.
	srv := tb.Dial(t)
	reqs, _ := srv.SubscribeReceipt(ctxT(t), "/queue/rpc", "auto")
	// The requester subscribes to its temporary queue and asks.
	cli := tb.Dial(t)
	replies, err := cli.SubscribeReceipt(ctxT(t), "/temp-queue/answers", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.SendReceipt(ctxT(t), "/queue/rpc", []byte("ping"), hdr("reply-to", "/temp-queue/answers")); err != nil {
		t.Fatal(err)
	}
	req := recv(t, reqs)
	replyTo := req.Get("reply-to")
	if !strings.HasPrefix(replyTo, "/queue/#tmp.") || !strings.HasSuffix(replyTo, ".answers") {
		t.Fatalf("reply-to rewritten to %q, want /queue/#tmp.SESSION.answers", replyTo)
	}
	if _, err := srv.SendReceipt(ctxT(t), replyTo, []byte("pong")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, replies); string(m.Body) != "pong" {
		t.Fatalf("reply %q", m.Body)
	}
	// Nobody else may read it.
	thief := tb.Dial(t)
	if _, err := thief.SubscribeReceipt(ctxT(t), replyTo, "auto"); err == nil || !strings.Contains(err.Error(), "temporary queue") {
		t.Fatalf("another connection subscribed to %s: %v", replyTo, err)
	}
	// When the requester goes, so does its queue; late replies are dropped
	// with a RECEIPT saying so.
	cli.Disconnect(ctxT(t))
	name := strings.TrimPrefix(replyTo, "/queue/")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := tb.B.Queue(name); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporary queue %s still exists after its connection ended", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r, err := srv.Request(ctxT(t), &stomp.Frame{Command: "SEND", Headers: stomp.Headers{hdr("destination", replyTo)}, Body: []byte("late")})
	if err != nil || r.Get("dropped") == "" {
		t.Fatalf("late reply: receipt %v, err %v; want a RECEIPT with dropped", r, err)
	}
	if _, ok := tb.B.Queue(name); ok {
		t.Fatal("a late reply recreated the temporary queue")
	}
}
