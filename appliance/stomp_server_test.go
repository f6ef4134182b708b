package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func TestConnect_Versions(t *testing.T) {
	tb := mustStartBroker(t, nil)
	for _, tc := range []struct {
		accept, want string
	}{
		{"", "1.0"},
		{"1.0", "1.0"},
		{"1.1", "1.1"},
		{"1.0,1.1,1.2", "1.2"},
		{"1.2,2.0", "1.2"},
	} {
		t.Run("accept="+tc.accept, func(t *testing.T) {
			r := dialRaw(t, tb)
			hdrs := "host:x\n"
			if tc.accept != "" {
				hdrs += "accept-version:" + tc.accept + "\n"
			}
			r.write("CONNECT\n" + hdrs + "\n\x00")
			f := r.frame()
			if f.Command != "CONNECTED" || f.Get("version") != tc.want {
				t.Fatalf("got %s version %q, want CONNECTED version %q", f.Command, f.Get("version"), tc.want)
			}
			if !strings.HasPrefix(f.Get("server"), "herald/") || f.Get("session") == "" {
				t.Fatalf("CONNECTED lacks server or session: %v", f.Headers)
			}
			if tc.want != "1.0" && f.Get("heart-beat") == "" {
				t.Fatalf("CONNECTED lacks heart-beat: %v", f.Headers)
			}
		})
	}
	t.Run("unsupported", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("CONNECT\naccept-version:2.0\nhost:x\n\n\x00")
		f := r.frame()
		if f.Command != "ERROR" || f.Get("version") != "1.0,1.1,1.2" {
			t.Fatalf("got %s %v, want ERROR with version 1.0,1.1,1.2", f.Command, f.Headers)
		}
		r.closed()
	})
	t.Run("STOMP frame", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("STOMP\naccept-version:1.2\nhost:x\n\n\x00")
		if f := r.frame(); f.Command != "CONNECTED" {
			t.Fatalf("got %s, want CONNECTED", f.Command)
		}
	})
	t.Run("frame before CONNECT", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("SEND\ndestination:/queue/x\n\nhi\x00")
		f := r.frame()
		if f.Command != "ERROR" || !strings.Contains(f.Get("message"), "CONNECT") {
			t.Fatalf("got %s %v, want ERROR about CONNECT", f.Command, f.Headers)
		}
		r.closed()
	})
}

func TestReceipts_EveryFrame(t *testing.T) {
	tb := mustStartBroker(t, nil)
	r := dialRaw(t, tb)
	r.connect("1.2")
	frames := []string{
		"SUBSCRIBE\nid:s1\ndestination:/topic/t\nreceipt:r1\n\n\x00",
		"SEND\ndestination:/topic/t\nreceipt:r2\n\nhello\x00",
		"BEGIN\ntransaction:tx1\nreceipt:r3\n\n\x00",
		"SEND\ndestination:/queue/q\ntransaction:tx1\nreceipt:r4\n\nq\x00",
		"ABORT\ntransaction:tx1\nreceipt:r5\n\n\x00",
		"UNSUBSCRIBE\nid:s1\nreceipt:r6\n\n\x00",
		"DISCONNECT\nreceipt:r7\n\n\x00",
	}
	for _, f := range frames {
		r.write(f)
	}
	var got []string
	for len(got) < 7 {
		f := r.frame()
		switch f.Command {
		case "RECEIPT":
			got = append(got, f.Get("receipt-id"))
		case "MESSAGE":
			if string(f.Body) != "hello" || f.Get("subscription") != "s1" || f.Get("destination") != "/topic/t" {
				t.Fatalf("bad MESSAGE %v %q", f.Headers, f.Body)
			}
		default:
			t.Fatalf("unexpected %s %v", f.Command, f.Headers)
		}
	}
	if strings.Join(got, ",") != "r1,r2,r3,r4,r5,r6,r7" {
		t.Fatalf("receipts %v, want r1..r7 in order", got)
	}
	r.closed()
}

func TestFrames_EscapingAndBodies(t *testing.T) {
	tb := mustStartBroker(t, nil)
	for _, v := range []string{"1.0", "1.1", "1.2"} {
		t.Run(v, func(t *testing.T) {
			c := tb.Dial(t, func(o *client.Options) { o.AcceptVersion = v })
			if c.Version() != v {
				t.Fatalf("version %s, want %s", c.Version(), v)
			}
			sub, err := c.SubscribeReceipt(ctxT(t), "/queue/esc"+v, "auto")
			if err != nil {
				t.Fatal(err)
			}
			value := "a:b\\c"
			if v != "1.0" {
				value += "\nd"
				if v == "1.2" {
					value += "\re"
				}
			}
			body := []byte("bin\x00ary\x00\n")
			if _, err := c.SendReceipt(ctxT(t), "/queue/esc"+v, body, hdr("x-weird", value), hdr("x-rep", "first"), hdr("x-rep", "second")); err != nil {
				t.Fatal(err)
			}
			m := recv(t, sub)
			if string(m.Body) != string(body) {
				t.Fatalf("body %q, want %q", m.Body, body)
			}
			if got := m.Get("x-weird"); got != value {
				t.Fatalf("header %q, want %q", got, value)
			}
			if got := m.Get("x-rep"); got != "first" {
				t.Fatalf("repeated header: got %q, want first", got)
			}
		})
	}
	t.Run("CRLF", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("CONNECT\r\naccept-version:1.2\r\nhost:x\r\n\r\n\x00\r\n")
		if f := r.frame(); f.Command != "CONNECTED" {
			t.Fatalf("got %s", f.Command)
		}
		r.r.SetVersion("1.2")
		r.write("SUBSCRIBE\r\nid:1\r\ndestination:/topic/crlf\r\nreceipt:s\r\n\r\n\x00")
		if f := r.frame(); f.Command != "RECEIPT" {
			t.Fatalf("got %s", f.Command)
		}
		r.write("SEND\r\ndestination:/topic/crlf\r\n\r\nx\x00\r\n")
		if f := r.frame(); f.Command != "MESSAGE" || string(f.Body) != "x" {
			t.Fatalf("got %s %q", f.Command, f.Body)
		}
	})
}

func TestMalformedInput(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxBodyBytes = 1024
		c.Stomp.MaxHeaders = 8
	})
	// A healthy connection that must carry on through every bad one.
	good := tb.Dial(t)
	sub, err := good.SubscribeReceipt(ctxT(t), "/topic/alive", "auto")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, input, want string
		connect           bool
	}{
		{"garbage", "\x01\x02garbage\n\n\x00", "malformed command line", false},
		{"unknown command", "FLY\n\n\x00", "unknown command", true},
		{"bad escape", "SEND\ndestination:/queue/x\nh:\\t\n\nb\x00", "undefined escape", true},
		{"oversized body", "SEND\ndestination:/queue/x\ncontent-length:5000\n\n", "exceeds the limit", true},
		{"oversized body without length", "SEND\ndestination:/queue/x\n\n" + strings.Repeat("x", 3000) + "\x00", "exceeds the limit", true},
		{"too many headers", "SEND\ndestination:/queue/x\n" + strings.Repeat("a:b\n", 10) + "\nb\x00", "too many headers", true},
		{"header without colon", "SEND\ndestination:/queue/x\nnocolon\n\nb\x00", "without colon", true},
		{"bad content-length", "SEND\ndestination:/queue/x\ncontent-length:-1\n\nb\x00", "content-length", true},
		{"missing destination", "SEND\n\nb\x00", "missing destination", true},
		{"bad destination", "SEND\ndestination:/nowhere/x\n\nb\x00", "invalid destination", true},
		{"wildcard send", "SEND\ndestination:/topic/a.*\n\nb\x00", "invalid destination", true},
		{"bad ack mode", "SUBSCRIBE\nid:1\ndestination:/queue/x\nack:sometimes\n\n\x00", "invalid ack mode", true},
		{"missing subscription id", "SUBSCRIBE\ndestination:/queue/x\n\n\x00", "missing id", true},
		{"commit unknown tx", "COMMIT\ntransaction:nope\nreceipt:r\n\n\x00", "no such transaction", true},
		{"second CONNECT", "CONNECT\naccept-version:1.2\n\n\x00", "already connected", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, tb)
			if tc.connect {
				r.connect("1.2")
			}
			r.write(tc.input)
			f := r.frame()
			if f.Command != "ERROR" || !strings.Contains(f.Get("message"), tc.want) {
				t.Fatalf("got %s message %q, want ERROR containing %q", f.Command, f.Get("message"), tc.want)
			}
			if strings.Contains(tc.input, "receipt:r") && f.Get("receipt-id") != "r" {
				t.Fatalf("ERROR lacks receipt-id r: %v", f.Headers)
			}
			r.closed()
			// The daemon and the other connection carry on.
			if _, err := good.SendReceipt(ctxT(t), "/topic/alive", []byte(tc.name)); err != nil {
				t.Fatalf("healthy connection broken: %v", err)
			}
			if m := recv(t, sub); string(m.Body) != tc.name {
				t.Fatalf("got %q, want %q", m.Body, tc.name)
			}
		})
	}
}

func TestFramesBeforeClose(t *testing.T) {
	// catstomp writes its SENDs and closes the socket without DISCONNECT:
	// every frame that arrived must still be processed.
	tb := mustStartBroker(t, nil)
	r := dialRaw(t, tb)
	r.connect("1.1")
	var sb strings.Builder
	for i := 0; i < 50; i++ {
		sb.WriteString("SEND\ndestination:/queue/catstomp\n\nline" + string(rune('A'+i%26)) + "\x00")
	}
	r.write(sb.String())
	r.c.Close()
	c := tb.Dial(t)
	sub, err := c.Subscribe("/queue/catstomp", "client-individual", hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		m := recv(t, sub)
		if want := "line" + string(rune('A'+i%26)); string(m.Body) != want {
			t.Fatalf("message %d: got %q, want %q", i, m.Body, want)
		}
	}
}

func TestHeartBeats(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.HeartbeatSend = appliance.Duration{Duration: 100 * time.Millisecond}
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: 100 * time.Millisecond}
	})
	t.Run("server beats", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,100\n\n\x00")
		if f := r.frame(); f.Command != "CONNECTED" || f.Get("heart-beat") != "100,100" {
			t.Fatalf("got %s %v", f.Command, f.Headers)
		}
		r.c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 1)
		n, err := r.c.Read(buf)
		if err != nil || n != 1 || buf[0] != '\n' {
			t.Fatalf("no heart-beat within 1s: n=%d err=%v byte=%q", n, err, buf[:n])
		}
	})
	t.Run("silent client closed", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("CONNECT\naccept-version:1.2\nhost:x\nheart-beat:100,0\n\n\x00")
		r.frame()
		start := time.Now()
		// The first frame must be the ERROR saying why (r.frame skips
		// heart-beats and fails on a close without one), then the close.
		f := r.frame()
		if f.Command != stomp.CmdError || !strings.Contains(f.Get("message"), "heart-beat timeout") {
			t.Fatalf("got %s message %q, want ERROR message heart-beat timeout", f.Command, f.Get("message"))
		}
		r.closed()
		if d := time.Since(start); d < 200*time.Millisecond || d > 4*time.Second {
			t.Fatalf("closed after %s, want after 2x100ms+1s grace", d)
		}
	})
	t.Run("late beats tolerated", func(t *testing.T) {
		r := dialRaw(t, tb)
		r.write("CONNECT\naccept-version:1.2\nhost:x\nheart-beat:100,0\n\n\x00")
		r.frame()
		for i := 0; i < 5; i++ {
			// Not synchronisation: the client's pace, each beat 80ms later
			// than the 100ms promised, but within tolerance.
			time.Sleep(180 * time.Millisecond)
			r.write("\n")
		}
		r.write("SUBSCRIBE\nid:1\ndestination:/topic/x\nreceipt:ok\n\n\x00")
		if f := r.frame(); f.Command != "RECEIPT" {
			t.Fatalf("got %s %v, want RECEIPT", f.Command, f.Headers)
		}
	})
}

// TestHeartBeats_ClientIntervalBoundedByIdleTimeout: a client may not
// announce beats further apart than stomp.idle_timeout (it would hold an
// idle connection up to 2^31 ms, about 25 days, with a read deadline twice
// that): CONNECT gets an ERROR naming the setting and the most it may
// offer. An interval within the bound is taken.
func TestHeartBeats_ClientIntervalBoundedByIdleTimeout(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: 100 * time.Millisecond}
		c.Stomp.IdleTimeout = appliance.Duration{Duration: 2 * time.Second}
	})
	r := dialRaw(t, tb)
	r.write("CONNECT\naccept-version:1.2\nhost:x\nheart-beat:2147483647,0\n\n\x00")
	f := r.frame()
	if f.Command != stomp.CmdError || !strings.Contains(string(f.Body), "stomp.idle_timeout") || !strings.Contains(string(f.Body), "at most 2000") {
		t.Fatalf("got %s %v %q, want ERROR naming stomp.idle_timeout and the most to offer (2000)", f.Command, f.Headers, f.Body)
	}
	r.closed()
	r = dialRaw(t, tb)
	r.write("CONNECT\naccept-version:1.2\nhost:x\nheart-beat:2000,0\n\n\x00")
	if f := r.frame(); f.Command != "CONNECTED" {
		t.Fatalf("heart-beat:2000,0 with idle_timeout 2s: got %s %v, want CONNECTED", f.Command, f.Headers)
	}
}

func TestLimits(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxConnections = 3
		c.Stomp.MaxSubscriptions = 2
	})
	c1 := tb.Dial(t)
	for i := 0; i < 2; i++ {
		if _, err := c1.SubscribeReceipt(ctxT(t), "/topic/l", "auto"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c1.SubscribeReceipt(ctxT(t), "/topic/l", "auto")
	if err == nil || !strings.Contains(err.Error(), "too many subscriptions") {
		t.Fatalf("third subscription: got %v, want too many subscriptions", err)
	}
	// c1 is gone now; fill up to the connection limit.
	select {
	case <-c1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after ERROR")
	}
	// The client saw the close; wait until the broker has let the
	// connection go too, or its slot still counts.
	for deadline := time.Now().Add(5 * time.Second); tb.B.Stats().Connections > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("got %d connections 5s after the client's closed, want 0", tb.B.Stats().Connections)
		}
	}
	tb.Dial(t)
	tb.Dial(t)
	tb.Dial(t)
	r := dialRaw(t, tb)
	f := r.frame()
	if f.Command != stomp.CmdError || !strings.Contains(f.Get("message"), "too many connections") {
		t.Fatalf("got %s %v, want ERROR too many connections", f.Command, f.Headers)
	}
}

func TestDisconnect_ReceiptAfterPendingWork(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Journal.Sync = "full" })
	for i := 0; i < 20; i++ {
		r := dialRaw(t, tb)
		r.connect("1.2")
		// SENDs without receipts, then DISCONNECT with one: the RECEIPT must
		// come, and only once the SENDs are durable.
		var sb strings.Builder
		for j := 0; j < 10; j++ {
			sb.WriteString("SEND\ndestination:/queue/disc\n\nx\x00")
		}
		sb.WriteString("DISCONNECT\nreceipt:bye\n\n\x00")
		r.write(sb.String())
		if f := r.frame(); f.Command != "RECEIPT" || f.Get("receipt-id") != "bye" {
			t.Fatalf("round %d: got %s %v, want RECEIPT bye", i, f.Command, f.Headers)
		}
		r.closed()
	}
	tb.Restart()
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/disc", "auto", hdr("prefetch-count", "1000"))
	bodies(t, sub, 200)
	expectNone(t, sub, 100*time.Millisecond)
}

func TestLimits_MaxQueues(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MaxQueues = 3 })
	c := tb.Dial(t)
	for _, q := range []string{"a", "b", "c"} {
		if _, err := c.SendReceipt(ctxT(t), "/queue/"+q, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.SendReceipt(ctxT(t), "/queue/d", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "too many queues") {
		t.Fatalf("fourth queue: got %v, want too many queues", err)
	}
	c2 := tb.Dial(t)
	if _, err := c2.SendReceipt(ctxT(t), "/queue/a", []byte("existing queues still work")); err != nil {
		t.Fatal(err)
	}
}

// TestStomp10_UnsubscribeByDestination: in STOMP 1.0 an UNSUBSCRIBE may name
// the destination instead of the id; it ends the subscriptions to that
// destination even when they were made with an id of their own (as ActiveMQ
// does), and messages stop.
func TestStomp10_UnsubscribeByDestination(t *testing.T) {
	tb := mustStartBroker(t, nil)
	r := dialRaw(t, tb)
	r.write("CONNECT\n\n\x00")
	if f := r.frame(); f.Command != "CONNECTED" {
		t.Fatalf("got %s", f.Command)
	}
	r.write("SUBSCRIBE\nid:mine\ndestination:/topic/u10\nreceipt:s\n\n\x00")
	if f := r.frame(); f.Command != "RECEIPT" {
		t.Fatalf("SUBSCRIBE: got %s %v", f.Command, f.Headers)
	}
	r.write("UNSUBSCRIBE\ndestination:/topic/u10\nreceipt:u\n\n\x00")
	if f := r.frame(); f.Command != "RECEIPT" || f.Get("receipt-id") != "u" {
		t.Fatalf("UNSUBSCRIBE by destination: got %s %v %q, want RECEIPT u", f.Command, f.Headers, f.Body)
	}
	r.write("SEND\ndestination:/topic/u10\n\nx\x00SEND\ndestination:/queue/u10done\nreceipt:d\n\ny\x00")
	if f := r.frame(); f.Command != "RECEIPT" || f.Get("receipt-id") != "d" {
		t.Fatalf("after UNSUBSCRIBE: got %s %v %q, want only the RECEIPT (no MESSAGE)", f.Command, f.Headers, f.Body)
	}
}
