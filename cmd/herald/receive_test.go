package main

import (
	"net"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// fakeBroker serves one STOMP 1.2 connection: it answers CONNECT, sends msgs
// after SUBSCRIBE, records every frame it gets, and answers DISCONNECT.
func fakeBroker(t *testing.T, msgs ...*stomp.Frame) (string, <-chan []*stomp.Frame) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []*stomp.Frame, 1)
	go func() {
		var frames []*stomp.Frame
		defer func() { got <- frames }()
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer nc.Close()
		r := stomp.NewReader(nc, stomp.Limits{})
		for {
			f, err := r.ReadFrame()
			if err != nil {
				return
			}
			if f == nil {
				continue
			}
			frames = append(frames, f)
			switch f.Command {
			case stomp.CmdConnect:
				r.SetVersion(stomp.V12)
				nc.Write(stomp.Encode(stomp.NewFrame(stomp.CmdConnected, "version", "1.2"), stomp.V12))
			case stomp.CmdSubscribe:
				for _, m := range msgs {
					m.Headers.Set("subscription", f.Get("id"))
					nc.Write(stomp.Encode(m, stomp.V12))
				}
			case stomp.CmdDisconnect:
				nc.Write(stomp.Encode(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", f.Get("receipt")), stomp.V12))
				return
			}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), got
}

func TestReceive_JSONAndAcks(t *testing.T) {
	m1 := &stomp.Frame{Command: stomp.CmdMessage, Headers: stomp.Headers{{Key: "ack", Value: "a1"}, {Key: "k", Value: "x:y"}, {Key: "k", Value: "second"}}, Body: []byte("café <b>")}
	m2 := &stomp.Frame{Command: stomp.CmdMessage, Headers: stomp.Headers{{Key: "ack", Value: "a2"}}, Body: []byte("bin\xff")}
	addr, got := fakeBroker(t, m1, m2)
	code, stdout, stderr := runCLI(t, "", "--server", addr, "receive", "--json", "--count", "2", "--ack", "client-individual", "/queue/a")
	if code != exitOK {
		t.Fatalf("exit code: got %d, want 0 (stderr %q)", code, stderr)
	}
	want := `{"headers":{"ack":"a1","content-length":"9","k":"x:y","subscription":"sub-1"},"body":"café <b>"}` + "\n" +
		`{"headers":{"ack":"a2","content-length":"4","subscription":"sub-1"},"body":"bin\ufffd","body_base64":"Ymlu/w=="}` + "\n"
	if stdout != want {
		t.Errorf("stdout:\ngot  %s\nwant %s", stdout, want)
	}
	var cmds []string
	for _, f := range <-got {
		c := f.Command
		switch c {
		case stomp.CmdAck:
			c += " " + f.Get("id")
		case stomp.CmdSubscribe:
			c += " " + f.Get("destination") + " " + f.Get("ack") + " prefetch=" + f.Get("prefetch-count")
		}
		cmds = append(cmds, c)
	}
	if g, w := strings.Join(cmds, ", "), "CONNECT, SUBSCRIBE /queue/a client-individual prefetch=2, ACK a1, ACK a2, DISCONNECT"; g != w {
		t.Errorf("frames: got %q, want %q", g, w)
	}
}

func TestReceive_Plain(t *testing.T) {
	addr, _ := fakeBroker(t,
		&stomp.Frame{Command: stomp.CmdMessage, Body: []byte("one")},
		&stomp.Frame{Command: stomp.CmdMessage, Body: []byte("two\n")})
	code, stdout, stderr := runCLI(t, "", "--server", addr, "receive", "-n", "2", "/topic/t")
	if code != exitOK || stdout != "one\ntwo\n" {
		t.Errorf("got %d %q (stderr %q), want 0 \"one\\ntwo\\n\"", code, stdout, stderr)
	}
}

func TestReceive_Timeout(t *testing.T) {
	addr, _ := fakeBroker(t)
	code, _, stderr := runCLI(t, "", "--server", addr, "receive", "--timeout", "50ms", "/queue/empty")
	if code != exitTimeout || !strings.Contains(stderr, "no message on /queue/empty within 50ms") {
		t.Errorf("got %d %q, want %d and a timeout message", code, stderr, exitTimeout)
	}
}

func TestSend_StdinLines(t *testing.T) {
	addr, got := fakeBroker(t)
	code, stdout, stderr := runCLI(t, "a\r\nb\n\nc", "--server", addr, "send", "-H", "x=1", "--content-type", "text/plain", "/queue/a")
	if code != exitOK || stdout != "" || stderr != "" {
		t.Fatalf("got %d %q %q, want 0 and no output", code, stdout, stderr)
	}
	var bodies []string
	for _, f := range <-got {
		if f.Command == stomp.CmdSend {
			if f.Get("x") != "1" || f.Get("content-type") != "text/plain" || f.Get("destination") != "/queue/a" {
				t.Errorf("SEND headers: got %v", f.Headers)
			}
			bodies = append(bodies, string(f.Body))
		}
	}
	if g, w := strings.Join(bodies, "|"), "a|b||c"; g != w {
		t.Errorf("bodies: got %q, want %q", g, w)
	}
}
