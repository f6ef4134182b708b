package appliance

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// The topic messages a subscriber's writer has taken to write count in
// topics.subscriber_buffer_bytes until they are written: a subscriber that
// does not read holds one buffer's worth, not a batch being written plus
// another full buffer queued behind it (twice the bound).
func TestTopic_BatchBeingWrittenCountsInSubscriberBuffer(t *testing.T) {
	for _, policy := range []string{"drop-oldest", "disconnect"} {
		t.Run(policy, func(t *testing.T) {
			const byteLimit = 1 << 20
			cfg := DefaultConfig()
			cfg.Topics.SubscriberBufferBytes = byteLimit
			cfg.Topics.SlowSubscriber = policy
			b := New(Options{Config: cfg})

			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cli, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			srv, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			// Fill the socket's buffers with heart-beats (EOLs) the client
			// does not read yet: the writer's batch then cannot go into
			// the kernel.
			fill := []byte(strings.Repeat("\n", 64<<10))
			for {
				srv.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := srv.Write(fill); err != nil {
					break
				}
			}

			s := newSession(b, srv)
			s.writerWG.Add(1)
			go s.writer()
			defer func() {
				cli.Close()
				srv.Close()
				close(s.stopW)
				s.writerWG.Wait()
			}()
			sub := &subscription{id: "1", s: s}
			body := []byte(strings.Repeat("x", 60000))
			msg := func(i int) *stomp.Frame {
				f := stomp.NewFrame(stomp.CmdMessage, "subscription", "1", "destination", "/topic/t", "message-id", strconv.Itoa(i))
				f.Body = body
				return f
			}
			// One buffer's worth (17 messages of 60,275 bytes, frame
			// included, fit in 1 MiB; 18 do not), taken by the writer as
			// one batch.
			const batch = 17
			if size := frameSize(msg(0)); batch*size > byteLimit || (batch+1)*size <= byteLimit {
				t.Fatalf("a message weighs %d bytes: %d of them are not one full buffer of %d", size, batch, byteLimit)
			}
			s.wmu.Lock()
			for i := range batch {
				if !s.deliverTopic(sub, nil, msg(i)) {
					t.Fatalf("message %d of %d dropped, want all queued within %d bytes", i, batch, byteLimit)
				}
			}
			s.wmu.Unlock()
			waitUntil(t, "the writer takes the batch", func() bool {
				s.outMu.Lock()
				defer s.outMu.Unlock()
				return len(s.out) == 0
			})
			// The writer is stuck writing it: what comes now finds the
			// buffer full.
			accepted := 0
			for i := batch; i < 2*batch; i++ {
				if s.deliverTopic(sub, nil, msg(i)) {
					accepted++
				}
			}
			s.outMu.Lock()
			held := s.outBytes
			s.outMu.Unlock()
			if held > byteLimit {
				t.Fatalf("subscriber holds %d bytes of topic messages (%d more accepted while its writer was writing a batch), want at most topics.subscriber_buffer_bytes = %d", held, accepted, byteLimit)
			}

			r := stomp.NewReader(bufio.NewReader(cli), stomp.Limits{})
			r.SetVersion(stomp.V12)
			read := func() *stomp.Frame {
				cli.SetReadDeadline(time.Now().Add(10 * time.Second))
				for {
					f, err := r.ReadFrame()
					if err != nil {
						t.Fatalf("reading the subscriber's frames: %v", err)
					}
					if f != nil {
						return f
					}
				}
			}
			for i := range batch {
				f := read()
				if f.Command != stomp.CmdMessage || f.Get("message-id") != strconv.Itoa(i) {
					t.Fatalf("frame %d: %s message-id %q, want MESSAGE %d", i, f.Command, f.Get("message-id"), i)
				}
			}
			if policy == "disconnect" {
				f := read()
				if f.Command != stomp.CmdError || !strings.Contains(string(f.Body), "topics.subscriber_buffer_bytes") {
					t.Fatalf("got %s %q (message-id %q), want the slow-consumer ERROR naming topics.subscriber_buffer_bytes", f.Command, f.Get("message"), f.Get("message-id"))
				}
				return
			}
			// drop-oldest: the dropped messages are announced by the next.
			waitUntil(t, "the batch is written", func() bool {
				s.outMu.Lock()
				defer s.outMu.Unlock()
				return s.topicQ == 0 && s.outBytes == 0
			})
			if !s.deliverTopic(sub, nil, msg(2*batch)) {
				t.Fatal("a message into an empty buffer was dropped")
			}
			f := read()
			if f.Get("message-id") != strconv.Itoa(2*batch) || f.Get("dropped-before") != strconv.Itoa(batch-accepted) {
				t.Fatalf("next MESSAGE: message-id %q dropped-before %q, want %d and %d", f.Get("message-id"), f.Get("dropped-before"), 2*batch, batch-accepted)
			}
		})
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
