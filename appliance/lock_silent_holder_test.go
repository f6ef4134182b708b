package appliance_test

import (
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// A lock holder that stops sending heart-beats (and stops reading, so its
// socket is full) loses the lock at the heart-beat timeout (2 x 100 ms +
// 1 s here), not once its connection's writer gives up (it kept it until
// stomp.write_timeout: the release waited for the writer to flush).
func TestLock_SilentHolderReleasedAtHeartbeatTimeout(t *testing.T) {
	const writeTimeout = 20 * time.Second
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: 100 * time.Millisecond}
		c.Stomp.WriteTimeout = appliance.Duration{Duration: writeTimeout}
	})
	r := dialRaw(t, tb)
	r.write("CONNECT\naccept-version:1.2\nhost:test\nheart-beat:100,0\n\n\x00")
	if f := r.frame(); f.Command != "CONNECTED" {
		t.Fatalf("%v", f)
	}
	r.write("SUBSCRIBE\nid:1\ndestination:/lock/hb\nreceipt:r1\n\n\x00")
	if f := r.frame(); f.Command != "RECEIPT" {
		t.Fatalf("%v", f.Headers)
	}
	if f := r.frame(); f.Get("lock-token") != "1" {
		t.Fatalf("holder: %v", f.Headers)
	}
	// The holder also consumes a queue; it stops reading and beating now.
	r.write("SUBSCRIBE\nid:2\ndestination:/queue/flood\nack:auto\n\n\x00")
	silentSince := time.Now()
	p := tb.Dial(t)
	body := make([]byte, 1<<20)
	for i := 0; i < 24; i++ {
		if err := p.Send("/queue/flood", body); err != nil {
			t.Fatal(err)
		}
	}
	w := tb.Dial(t)
	s, err := w.SubscribeReceipt(ctxT(t), "/lock/hb", "auto")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-s.C():
		d := time.Since(silentSince)
		t.Logf("lock passed %v after the holder went silent (heart-beat timeout 1.2s, write_timeout %v): %v", d, writeTimeout, m.Headers)
		if d > 4*time.Second {
			t.Errorf("lock passed %v after the holder went silent; the heart-beat timeout is 1.2s", d)
		}
	case <-time.After(writeTimeout + 5*time.Second):
		t.Fatalf("lock not passed within %v", writeTimeout+5*time.Second)
	}
}
