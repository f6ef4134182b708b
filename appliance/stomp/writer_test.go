package stomp_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

func TestAppendFrame(t *testing.T) {
	tests := []struct {
		name    string
		version string
		frame   *stomp.Frame
		want    string
	}{
		{"SEND always has content-length", stomp.V12, stomp.NewFrame("SEND", "destination", "/q"), "SEND\ndestination:/q\ncontent-length:0\n\n\x00"},
		{"SUBSCRIBE without body has none", stomp.V12, stomp.NewFrame("SUBSCRIBE", "id", "1"), "SUBSCRIBE\nid:1\n\n\x00"},
		{"content-length replaced by true length", stomp.V12,
			&stomp.Frame{Command: "MESSAGE", Headers: stomp.Headers{{Key: "content-length", Value: "99"}, {Key: "k", Value: "v"}}, Body: []byte("a\x00b")},
			"MESSAGE\nk:v\ncontent-length:3\n\na\x00b\x00"},
		{"1.2 escapes", stomp.V12, stomp.NewFrame("MESSAGE", "a:b", "c\\d\ne\rf"), "MESSAGE\na\\cb:c\\\\d\\ne\\rf\ncontent-length:0\n\n\x00"},
		{"1.1 escapes", stomp.V11, stomp.NewFrame("MESSAGE", "a:b", "c\\d\nef"), "MESSAGE\na\\cb:c\\\\d\\nef\ncontent-length:0\n\n\x00"},
		{"1.1 has no escape for CR: header left out", stomp.V11, stomp.NewFrame("MESSAGE", "a", "e\rf", "k", "v"), "MESSAGE\nk:v\ncontent-length:0\n\n\x00"},
		{"1.0 raw", stomp.V10, stomp.NewFrame("MESSAGE", "k", "c:\\d"), "MESSAGE\nk:c:\\d\ncontent-length:0\n\n\x00"},
		{"1.0 value with EOLs left out", stomp.V10, stomp.NewFrame("MESSAGE", "a", "c\nd", "b", "e\rf", "k", "v"), "MESSAGE\nk:v\ncontent-length:0\n\n\x00"},
		{"1.0 key with colon or EOL left out", stomp.V10, stomp.NewFrame("MESSAGE", "content-length:1", "x", "a\nb", "c", "k", "v"), "MESSAGE\nk:v\ncontent-length:0\n\n\x00"},
		{"1.0 forged frame in a value left out", stomp.V10,
			stomp.NewFrame("MESSAGE", "x", "1\n\nA\x00MESSAGE\ndestination:/queue/x", "k", "v"), "MESSAGE\nk:v\ncontent-length:0\n\n\x00"},
		{"1.2 NUL in value left out", stomp.V12, stomp.NewFrame("MESSAGE", "x", "a\x00MESSAGE", "k", "v"), "MESSAGE\nk:v\ncontent-length:0\n\n\x00"},
		{"1.1 NUL in key left out", stomp.V11, stomp.NewFrame("MESSAGE", "x\x00", "a", "k", "v"), "MESSAGE\nk:v\ncontent-length:0\n\n\x00"},
		{"CONNECTED value with LF left out", stomp.V12, stomp.NewFrame("CONNECTED", "server", "a\nb", "version", "1.2"), "CONNECTED\nversion:1.2\n\n\x00"},
		{"CONNECTED never escaped", stomp.V12, stomp.NewFrame("CONNECTED", "server", "a:b\\c"), "CONNECTED\nserver:a:b\\c\n\n\x00"},
		{"CONNECT never escaped", stomp.V12, stomp.NewFrame("CONNECT", "passcode", "p:\\w"), "CONNECT\npasscode:p:\\w\n\n\x00"},
		{"repeated headers kept in order", stomp.V12, stomp.NewFrame("SUBSCRIBE", "k", "1", "k", "2"), "SUBSCRIBE\nk:1\nk:2\n\n\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(stomp.AppendFrame([]byte("prefix"), tt.frame, tt.version))
			if got != "prefix"+tt.want {
				t.Errorf("got %q, want %q", got, "prefix"+tt.want)
			}
			if enc := string(stomp.Encode(tt.frame, tt.version)); enc != tt.want {
				t.Errorf("Encode: got %q, want %q", enc, tt.want)
			}
		})
	}
}

// headerText returns random text built mostly from the bytes escaping cares
// about, restricted to what version v can carry for cmd:
//   - 1.2 escaped frames: anything but NUL;
//   - 1.1 escaped frames: anything but NUL and CR (1.1 has no \r escape);
//   - 1.0 and CONNECT-family frames: no NUL, CR or LF, and no colon in keys.
//
// With body set it returns any text (a body may hold NULs).
func headerText(rng *rand.Rand, v, cmd string, key, body bool) string {
	alphabet := []byte("ab:\\\n\r\x00 \xff\t-")
	n := rng.IntN(12)
	var b strings.Builder
	for range n {
		c := alphabet[rng.IntN(len(alphabet))]
		if rng.IntN(3) == 0 {
			c = byte(rng.IntN(256))
		}
		switch {
		case body:
		case c == 0:
			continue
		case stomp.Escaped(v, cmd) && v == stomp.V12:
		case stomp.Escaped(v, cmd) && c == '\r':
			continue
		case !stomp.Escaped(v, cmd) && (c == '\r' || c == '\n' || (key && c == ':')):
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func TestAppendFrame_RoundTrip(t *testing.T) {
	commands := []string{"CONNECT", "STOMP", "CONNECTED", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK",
		"BEGIN", "COMMIT", "ABORT", "DISCONNECT", "MESSAGE", "RECEIPT", "ERROR"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, v := range []string{stomp.V10, stomp.V11, stomp.V12} {
		t.Run(v, func(t *testing.T) {
			var stream []byte
			var want []*stomp.Frame
			for i := range 2000 {
				cmd := commands[i%len(commands)]
				f := &stomp.Frame{Command: cmd}
				for range rng.IntN(5) {
					k := headerText(rng, v, cmd, true, false)
					if k == "content-length" {
						continue
					}
					f.Headers.Add(k, headerText(rng, v, cmd, false, false))
				}
				if rng.IntN(2) == 0 {
					f.Body = []byte(headerText(rng, stomp.V12, "SEND", false, true))
				}
				want = append(want, f)
				stream = stomp.AppendFrame(stream, f, v)
				if rng.IntN(4) == 0 {
					stream = append(stream, "\r\n"...)
				}
			}
			r := stomp.NewReader(bytes.NewReader(stream), stomp.Limits{})
			r.SetVersion(v)
			for i := 0; i < len(want); {
				got, err := r.ReadFrame()
				if err != nil {
					t.Fatalf("frame %d (%q): got error %v, want a frame", i, stomp.Encode(want[i], v), err)
				}
				if got == nil {
					continue
				}
				got.Headers.Del("content-length")
				if !sameFrame(got, want[i]) {
					t.Fatalf("frame %d: got %q, want %q", i, stomp.Encode(got, v), stomp.Encode(want[i], v))
				}
				i++
			}
			for {
				f, err := r.ReadFrame()
				if err == io.EOF {
					break
				}
				if f != nil || err != nil {
					t.Fatalf("after the last frame: got %v, %v, want io.EOF", f, err)
				}
			}
		})
	}
}

// TestAppendFrame_NeverForges writes frames whose headers hold any bytes, in
// every version, and decodes them: the header section never holds a NUL, and
// the reader gets back exactly the headers Writable accepts, unchanged, and
// then the body; no header can end its line or the frame early.
func TestAppendFrame_NeverForges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("ab:\\\n\r\x00 -")
	text := func() string {
		b := make([]byte, rng.IntN(10))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for _, v := range []string{stomp.V10, stomp.V11, stomp.V12} {
		for _, cmd := range []string{stomp.CmdMessage, stomp.CmdConnected, stomp.CmdError} {
			t.Run(v+"/"+cmd, func(t *testing.T) {
				dropped := 0
				for range 3000 {
					f := &stomp.Frame{Command: cmd, Body: []byte("b\x00MESSAGE\n\nforged\x00")}
					var want stomp.Headers
					for range rng.IntN(6) {
						h := stomp.Header{Key: text(), Value: text()}
						if h.Key == "content-length" {
							continue
						}
						f.Headers = append(f.Headers, h)
						if stomp.Writable(h, v, cmd) {
							want = append(want, h)
						} else {
							dropped++
						}
					}
					enc := stomp.Encode(f, v)
					head, _, ok := bytes.Cut(enc, []byte("\n\n"))
					if bytes.IndexByte(head, 0) >= 0 {
						t.Fatalf("header section of %q holds a NUL", enc)
					}
					r := stomp.NewReader(bytes.NewReader(enc), stomp.Limits{})
					r.SetVersion(v)
					g, err := r.ReadFrame()
					if err != nil || g == nil {
						t.Fatalf("decoding %q: got %v, %v, want a frame", enc, g, err)
					}
					g.Headers.Del("content-length")
					if !ok || !sameFrame(g, &stomp.Frame{Command: cmd, Headers: want, Body: f.Body}) {
						t.Fatalf("decoding %q: got headers %q body %q, want %q body %q", enc, g.Headers, g.Body, want, f.Body)
					}
					if extra, err := r.ReadFrame(); err != io.EOF {
						t.Fatalf("after the frame %q: got %v, %v, want io.EOF", enc, extra, err)
					}
				}
				if dropped == 0 {
					t.Fatalf("got no header left out, want some (the generator must produce them)")
				}
			})
		}
	}
}

// TestWritable_Rules checks Writable (a table of octet classes) against
// the rules written out with strings.ContainsAny, over random headers in
// every version and for escaped and unescaped commands.
func TestWritable_Rules(t *testing.T) {
	ref := func(h stomp.Header, v, cmd string) bool {
		bad := "\x00\n\r"
		switch {
		case stomp.Escaped(v, cmd) && v == stomp.V12:
			bad = "\x00"
		case stomp.Escaped(v, cmd):
			bad = "\x00\r"
		case strings.Contains(h.Key, ":"):
			return false
		}
		return !strings.ContainsAny(h.Key, bad) && !strings.ContainsAny(h.Value, bad)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte("a:\\\n\r\x00é")
	text := func() string {
		b := make([]byte, rng.IntN(6))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	seen := map[bool]int{}
	for range 20000 {
		h := stomp.Header{Key: text(), Value: text()}
		for _, v := range []string{stomp.V10, stomp.V11, stomp.V12} {
			for _, cmd := range []string{stomp.CmdMessage, stomp.CmdConnected} {
				got, want := stomp.Writable(h, v, cmd), ref(h, v, cmd)
				if got != want {
					t.Fatalf("Writable(%q, %s, %s) = %v, want %v", h, v, cmd, got, want)
				}
				seen[got]++
			}
		}
	}
	if seen[true] == 0 || seen[false] == 0 {
		t.Fatalf("outcomes %v: want both writable and not", seen)
	}
}
