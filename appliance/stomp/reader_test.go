package stomp_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/herald-mq/herald/appliance/stomp"
)

// readAll decodes every frame of input, skipping heart-beats, until the first
// error, which it returns (io.EOF for a clean end).
func readAll(t *testing.T, input, version string, limits stomp.Limits) ([]*stomp.Frame, int, error) {
	t.Helper()
	r := stomp.NewReader(strings.NewReader(input), limits)
	r.SetVersion(version)
	var frames []*stomp.Frame
	beats := 0
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return frames, beats, err
		}
		if f == nil {
			beats++
			continue
		}
		frames = append(frames, f)
	}
}

// mustReadOne decodes input, which must hold exactly one frame.
func mustReadOne(t *testing.T, input, version string) *stomp.Frame {
	t.Helper()
	frames, _, err := readAll(t, input, version, stomp.Limits{})
	if err != io.EOF {
		t.Fatalf("read %q: got error %v, want io.EOF after the frame", input, err)
	}
	if len(frames) != 1 {
		t.Fatalf("read %q: got %d frames, want 1", input, len(frames))
	}
	return frames[0]
}

func hdrs(kv ...string) stomp.Headers { return stomp.NewFrame("", kv...).Headers }

func sameFrame(a, b *stomp.Frame) bool {
	if a.Command != b.Command || !bytes.Equal(a.Body, b.Body) || len(a.Headers) != len(b.Headers) {
		return false
	}
	return len(a.Headers) == 0 || reflect.DeepEqual(a.Headers, b.Headers)
}

func TestReader_Commands(t *testing.T) {
	commands := []string{
		stomp.CmdConnect, stomp.CmdStomp, stomp.CmdConnected, stomp.CmdSend, stomp.CmdSubscribe,
		stomp.CmdUnsubscribe, stomp.CmdAck, stomp.CmdNack, stomp.CmdBegin, stomp.CmdCommit,
		stomp.CmdAbort, stomp.CmdDisconnect, stomp.CmdMessage, stomp.CmdReceipt, stomp.CmdError,
	}
	for _, cmd := range commands {
		for _, v := range []string{"", stomp.V10, stomp.V11, stomp.V12} {
			t.Run(cmd+"/"+v, func(t *testing.T) {
				f := mustReadOne(t, cmd+"\nreceipt:r-1\nx:y\n\nhello\x00", v)
				want := &stomp.Frame{Command: cmd, Headers: hdrs("receipt", "r-1", "x", "y"), Body: []byte("hello")}
				if !sameFrame(f, want) {
					t.Errorf("got %+v, want %+v", f, want)
				}
			})
		}
	}
}

func TestReader_LineEndings(t *testing.T) {
	want := &stomp.Frame{Command: "SEND", Headers: hdrs("destination", "/queue/a", "content-type", "text/plain"), Body: []byte("a\r\nb")}
	tests := map[string]string{
		"LF":    "SEND\ndestination:/queue/a\ncontent-type:text/plain\n\na\r\nb\x00",
		"CRLF":  "SEND\r\ndestination:/queue/a\r\ncontent-type:text/plain\r\n\r\na\r\nb\x00",
		"mixed": "SEND\r\ndestination:/queue/a\ncontent-type:text/plain\r\n\na\r\nb\x00",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			for _, v := range []string{stomp.V10, stomp.V11, stomp.V12} {
				if got := mustReadOne(t, in, v); !sameFrame(got, want) {
					t.Errorf("version %s: got %+v, want %+v", v, got, want)
				}
			}
		})
	}
}

func TestReader_HeartBeats(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		frames int
		beats  int
	}{
		{"only LF", "\n\n\n", 0, 3},
		{"only CRLF", "\r\n\r\n", 0, 2},
		{"before first frame", "\n\r\nSEND\n\n\x00", 1, 2},
		{"between frames", "SEND\n\n\x00\n\r\n\nSEND\n\n\x00", 2, 3},
		{"after last frame", "SEND\n\n\x00\r\n\n", 1, 2},
		{"none", "SEND\n\n\x00SEND\n\n\x00", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, beats, err := readAll(t, tt.input, stomp.V12, stomp.Limits{})
			if err != io.EOF {
				t.Fatalf("got error %v, want io.EOF", err)
			}
			if len(frames) != tt.frames || beats != tt.beats {
				t.Errorf("got %d frames and %d heart-beats, want %d and %d", len(frames), beats, tt.frames, tt.beats)
			}
		})
	}
}

func TestReader_RepeatedHeaders(t *testing.T) {
	f := mustReadOne(t, "MESSAGE\nfoo:first\nbar:1\nfoo:second\nfoo:third\n\n\x00", stomp.V12)
	if got := f.Get("foo"); got != "first" {
		t.Errorf("Get(foo): got %q, want %q", got, "first")
	}
	if got, want := len(f.Headers), 4; got != want {
		t.Errorf("headers: got %d, want %d (repeats are kept)", got, want)
	}
	if got := f.Headers[3].Value; got != "third" {
		t.Errorf("last foo: got %q, want %q", got, "third")
	}
}

func TestReader_Bodies(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string
	}{
		{"content-length with NULs", "SEND\ncontent-length:5\n\na\x00b\x00c\x00", []string{"a\x00b\x00c"}},
		{"content-length all NULs", "SEND\ncontent-length:3\n\n\x00\x00\x00\x00", []string{"\x00\x00\x00"}},
		{"content-length zero", "SEND\ncontent-length:0\n\n\x00", []string{""}},
		{"content-length first wins", "SEND\ncontent-length:2\ncontent-length:9\n\nab\x00", []string{"ab"}},
		{"content-length leading zeros", "SEND\ncontent-length:002\n\nab\x00", []string{"ab"}},
		{"no content-length", "SEND\n\nhello world\x00", []string{"hello world"}},
		{"no content-length empty", "SEND\n\n\x00", []string{""}},
		{"no content-length stops at first NUL", "SEND\n\nab\x00SEND\n\ncd\x00", []string{"ab", "cd"}},
		{"body with EOLs", "SEND\n\n\n\r\nx\n\x00", []string{"\n\r\nx\n"}},
		{"body larger than the read buffer", "SEND\n\n" + strings.Repeat("x", 100<<10) + "\x00", []string{strings.Repeat("x", 100<<10)}},
		{"binary body with content-length", "SEND\ncontent-length:4\n\n\xff\x00\xfe\n\x00", []string{"\xff\x00\xfe\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, _, err := readAll(t, tt.input, stomp.V12, stomp.Limits{})
			if err != io.EOF {
				t.Fatalf("got error %v, want io.EOF", err)
			}
			if len(frames) != len(tt.want) {
				t.Fatalf("got %d frames, want %d", len(frames), len(tt.want))
			}
			for i, f := range frames {
				if string(f.Body) != tt.want[i] {
					t.Errorf("frame %d body: got %q, want %q", i, f.Body, tt.want[i])
				}
			}
		})
	}
}

func TestReader_Escaping(t *testing.T) {
	tests := []struct {
		name     string
		version  string
		cmd      string
		line     string
		key, val string
		wantErr  bool
	}{
		{"1.0 no unescaping", stomp.V10, "SEND", `a\nb:c\cd\\e\r`, `a\nb`, `c\cd\\e\r`, false},
		{"unset version no unescaping", "", "MESSAGE", `k\c:v\n`, `k\c`, `v\n`, false},
		{"1.0 raw colon in value", stomp.V10, "SEND", "k:a:b", "k", "a:b", false},
		{"1.1 newline", stomp.V11, "SEND", `k\n:v\nw`, "k\n", "v\nw", false},
		{"1.1 colon", stomp.V11, "SEND", `k\c:v\c`, "k:", "v:", false},
		{"1.1 backslash", stomp.V11, "SEND", `k\\:v\\\\`, `k\`, `v\\`, false},
		{"1.1 carriage return undefined", stomp.V11, "SEND", `k:v\r`, "", "", true},
		{"1.1 raw colon in value tolerated", stomp.V11, "SEND", "k:a:b", "k", "a:b", false},
		{"1.2 carriage return", stomp.V12, "MESSAGE", `k\r:v\r\n`, "k\r", "v\r\n", false},
		{"1.2 all", stomp.V12, "MESSAGE", `\\\c\n\r:\r\n\c\\`, "\\:\n\r", "\r\n:\\", false},
		{"1.2 undefined escape", stomp.V12, "SEND", `k:\t`, "", "", true},
		{"1.2 undefined escape in key", stomp.V12, "SEND", `\x:v`, "", "", true},
		{"1.2 trailing backslash", stomp.V12, "SEND", `k:v\`, "", "", true},
		{"1.1 trailing backslash in key", stomp.V11, "SEND", `k\:v`, "", "", true},
		{"1.2 CONNECT never unescaped", stomp.V12, "CONNECT", `passcode:a\cb\t\`, "passcode", `a\cb\t\`, false},
		{"1.2 STOMP never unescaped", stomp.V12, "STOMP", `login:x\ny`, "login", `x\ny`, false},
		{"1.1 CONNECTED never unescaped", stomp.V11, "CONNECTED", `server:h\c1`, "server", `h\c1`, false},
		{"1.2 ERROR unescaped", stomp.V12, "ERROR", `message:bad\cthing`, "message", "bad:thing", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, _, err := readAll(t, tt.cmd+"\n"+tt.line+"\n\n\x00", tt.version, stomp.Limits{})
			if tt.wantErr {
				var se *stomp.Error
				if !errors.As(err, &se) || se.Limit != "" {
					t.Fatalf("got error %#v, want a *stomp.Error without Limit", err)
				}
				return
			}
			if err != io.EOF || len(frames) != 1 {
				t.Fatalf("got %d frames and error %v, want 1 frame and io.EOF", len(frames), err)
			}
			h := frames[0].Headers
			if len(h) != 1 || h[0].Key != tt.key || h[0].Value != tt.val {
				t.Errorf("got headers %q, want [{%q %q}]", h, tt.key, tt.val)
			}
		})
	}
}

func TestReader_Malformed(t *testing.T) {
	tests := []struct {
		name  string
		input string
	}{
		{"header line without colon", "SEND\ndestination\n\n\x00"},
		{"garbage command line", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n\x00"},
		{"HTTP request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"lowercase command", "send\n\n\x00"},
		{"command with space", "SEND \n\n\x00"},
		{"command too long", strings.Repeat("A", 33) + "\n\n\x00"},
		{"empty command line after NUL", "\x00\n\n\x00"},
		{"invalid content-length", "SEND\ncontent-length:abc\n\n\x00"},
		{"negative content-length", "SEND\ncontent-length:-1\n\n\x00"},
		{"huge content-length", "SEND\ncontent-length:99999999999999999999999\n\n\x00"},
		{"no NUL after content-length octets", "SEND\ncontent-length:2\n\nabc\x00"},
		{"stray carriage return between frames", "\rSEND\n\n\x00"},
		{"undefined escape", "SEND\nk:\\q\n\n\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readAll(t, tt.input, stomp.V12, stomp.Limits{})
			var se *stomp.Error
			if !errors.As(err, &se) {
				t.Fatalf("got error %v (%T), want *stomp.Error", err, err)
			}
			if se.Limit != "" {
				t.Errorf("Limit: got %q, want empty", se.Limit)
			}
			if se.Reason == "" || !strings.HasPrefix(se.Error(), "stomp: ") {
				t.Errorf("Error(): got %q, want a non-empty reason prefixed with %q", se.Error(), "stomp: ")
			}
		})
	}
}

func TestReader_Limits(t *testing.T) {
	manyHeaders := func(n int) string {
		var b strings.Builder
		b.WriteString("SEND\n")
		for i := range n {
			b.WriteString("h:")
			b.WriteString(strings.Repeat("v", i%3))
			b.WriteString("\n")
		}
		return b.String() + "\n\x00"
	}
	tests := []struct {
		name   string
		limits stomp.Limits
		input  string
		limit  string // "" = must be accepted
	}{
		{"max_headers at limit", stomp.Limits{MaxHeaders: 4}, manyHeaders(4), ""},
		{"max_headers over", stomp.Limits{MaxHeaders: 4}, manyHeaders(5), "max_headers"},
		{"max_headers default", stomp.Limits{}, manyHeaders(stomp.DefaultMaxHeaders + 1), "max_headers"},
		{"max_header_line at limit", stomp.Limits{MaxHeaderLine: 10}, "SEND\nk:12345678\n\n\x00", ""},
		{"max_header_line at limit CRLF", stomp.Limits{MaxHeaderLine: 10}, "SEND\r\nk:12345678\r\n\r\n\x00", ""},
		{"max_header_line over", stomp.Limits{MaxHeaderLine: 10}, "SEND\nk:123456789\n\n\x00", "max_header_line"},
		{"max_header_line over CRLF", stomp.Limits{MaxHeaderLine: 10}, "SEND\r\nk:123456789\r\n\r\n\x00", "max_header_line"},
		{"max_header_line command line", stomp.Limits{MaxHeaderLine: 3}, "SEND\n\n\x00", "max_header_line"},
		{"max_header_line beyond read buffer", stomp.Limits{}, "SEND\nk:" + strings.Repeat("v", 70<<10) + "\n\n\x00", "max_header_line"},
		{"max_header_line default", stomp.Limits{MaxHeaderBytes: 1 << 20}, "SEND\nk:" + strings.Repeat("v", stomp.DefaultMaxHeaderLine) + "\n\n\x00", "max_header_line"},
		{"max_header_bytes at limit", stomp.Limits{MaxHeaderBytes: 14}, "SEND\nk:12345\n\n\x00", ""},
		{"max_header_bytes over", stomp.Limits{MaxHeaderBytes: 14}, "SEND\nk:123456\n\n\x00", "max_header_bytes"},
		{"max_header_bytes many lines", stomp.Limits{MaxHeaderBytes: 100}, manyHeaders(40), "max_header_bytes"},
		{"max_body content-length at limit", stomp.Limits{MaxBody: 4}, "SEND\ncontent-length:4\n\nabcd\x00", ""},
		{"max_body content-length over", stomp.Limits{MaxBody: 4}, "SEND\ncontent-length:5\n\nabcde\x00", "max_body"},
		{"max_body content-length over, body absent", stomp.Limits{MaxBody: 4}, "SEND\ncontent-length:1000000\n\n", "max_body"},
		{"max_body no content-length at limit", stomp.Limits{MaxBody: 4}, "SEND\n\nabcd\x00", ""},
		{"max_body no content-length over", stomp.Limits{MaxBody: 4}, "SEND\n\nabcde\x00", "max_body"},
		{"max_body no content-length no NUL", stomp.Limits{MaxBody: 4}, "SEND\n\nabcdefghijkl", "max_body"},
		{"max_body no content-length beyond read buffer", stomp.Limits{MaxBody: 100 << 10}, "SEND\n\n" + strings.Repeat("x", 200<<10) + "\x00", "max_body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readAll(t, tt.input, stomp.V12, tt.limits)
			if tt.limit == "" {
				if err != io.EOF {
					t.Fatalf("got error %v, want io.EOF", err)
				}
				return
			}
			var se *stomp.Error
			if !errors.As(err, &se) {
				t.Fatalf("got error %v (%T), want *stomp.Error", err, err)
			}
			if se.Limit != tt.limit {
				t.Errorf("Limit: got %q, want %q (reason %q)", se.Limit, tt.limit, se.Reason)
			}
		})
	}
}

func TestReader_EOF(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		for _, in := range []string{"", "\n", "\r\n\n", "SEND\n\n\x00", "SEND\n\n\x00\n"} {
			if _, _, err := readAll(t, in, stomp.V12, stomp.Limits{}); err != io.EOF {
				t.Errorf("input %q: got %v, want io.EOF", in, err)
			}
		}
	})
	t.Run("mid-frame", func(t *testing.T) {
		frames := []string{
			"SEND\r\ndestination:/queue/a\r\nreceipt:7\r\n\r\nhello\x00",
			"MESSAGE\ncontent-length:5\nk:v\n\na\x00b\x00c\x00",
		}
		for _, full := range frames {
			for n := 1; n < len(full); n++ {
				in := "\n" + full[:n]
				if _, _, err := readAll(t, in, stomp.V12, stomp.Limits{}); err != io.ErrUnexpectedEOF {
					t.Errorf("input %q: got %v, want io.ErrUnexpectedEOF", in, err)
				}
			}
		}
	})
	t.Run("carriage return at end", func(t *testing.T) {
		if _, _, err := readAll(t, "SEND\n\n\x00\r", stomp.V12, stomp.Limits{}); err != io.ErrUnexpectedEOF {
			t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("read error passes through", func(t *testing.T) {
		boom := errors.New("boom")
		r := stomp.NewReader(io.MultiReader(strings.NewReader("SEND\n"), iotest.ErrReader(boom)), stomp.Limits{})
		if _, err := r.ReadFrame(); !errors.Is(err, boom) {
			t.Errorf("got %v, want %v", err, boom)
		}
	})
}

// TestReader_OneByteReads checks that decoding does not depend on how the
// input is split into reads.
func TestReader_OneByteReads(t *testing.T) {
	in := "CONNECT\naccept-version:1.2\n\n\x00\nSEND\r\ndestination:/q\r\ncontent-length:3\r\n\r\na\x00b\x00\r\nMESSAGE\nk\\c:v\\n\n\nbody\x00"
	whole := stomp.NewReader(strings.NewReader(in), stomp.Limits{})
	split := stomp.NewReader(iotest.OneByteReader(strings.NewReader(in)), stomp.Limits{})
	whole.SetVersion(stomp.V12)
	split.SetVersion(stomp.V12)
	for i := 0; ; i++ {
		a, errA := whole.ReadFrame()
		b, errB := split.ReadFrame()
		if errA != errB {
			t.Fatalf("step %d: got error %v, want %v", i, errB, errA)
		}
		if errA != nil {
			if errA != io.EOF {
				t.Fatalf("step %d: got error %v, want io.EOF", i, errA)
			}
			return
		}
		if (a == nil) != (b == nil) || (a != nil && !sameFrame(a, b)) {
			t.Fatalf("step %d: got %+v, want %+v", i, b, a)
		}
	}
}

// TestReader_LargeBodies checks bodies around and beyond the sizes where the
// body buffer grows, delivered whole, in odd-sized reads and one byte at a
// time, followed by a second frame.
func TestReader_LargeBodies(t *testing.T) {
	for _, size := range []int{64<<10 - 1, 64 << 10, 64<<10 + 1, 128<<10 + 1, 1<<20 + 3} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i*7 + i>>8)
		}
		body[size/2] = 0 // content-length bodies may hold NULs
		in := string(stomp.Encode(&stomp.Frame{Command: stomp.CmdSend, Body: body}, stomp.V12)) + "SEND\n\nnext\x00"
		sources := map[string]func() io.Reader{
			"whole":    func() io.Reader { return strings.NewReader(in) },
			"half":     func() io.Reader { return iotest.HalfReader(strings.NewReader(in)) },
			"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(in)) },
		}
		for name, src := range sources {
			if name == "one byte" && size > 128<<10 {
				continue // slow, and adds nothing beyond the sizes below
			}
			r := stomp.NewReader(src(), stomp.Limits{})
			r.SetVersion(stomp.V12)
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatalf("size %d, %s: got error %v, want a frame", size, name, err)
			}
			if !bytes.Equal(f.Body, body) {
				t.Fatalf("size %d, %s: got a body of %d bytes that differs, want the %d sent", size, name, len(f.Body), size)
			}
			if f, err = r.ReadFrame(); err != nil || string(f.Body) != "next" {
				t.Fatalf("size %d, %s: got %v, %v after the body, want the frame \"next\"", size, name, f, err)
			}
		}
	}
}

// TestReader_NULInHeader: a NUL anywhere in a header line is refused in every
// version (relayed, it would end the frame early and let the rest of the line
// forge a frame for the subscribers).
func TestReader_NULInHeader(t *testing.T) {
	forged := "\x00MESSAGE\ndestination:/queue/x\nmessage-id:forged\n\nforged body"
	lines := map[string]string{
		"in value":             "k:v" + forged,
		"in key":               "k\x00x:v",
		"only byte of value":   "k:\x00",
		"after escaped value":  `k:a\nb` + "\x00",
		"before the colon":     "\x00:v",
		"line without a colon": "k\x00",
	}
	for _, v := range []string{"", stomp.V10, stomp.V11, stomp.V12} {
		for _, cmd := range []string{stomp.CmdSend, stomp.CmdConnect, stomp.CmdSubscribe} {
			for name, line := range lines {
				t.Run(v+"/"+cmd+"/"+name, func(t *testing.T) {
					frames, _, err := readAll(t, cmd+"\ndestination:/queue/a\n"+line+"\n\nbody\x00", v, stomp.Limits{})
					var se *stomp.Error
					if !errors.As(err, &se) {
						t.Fatalf("got %d frames and error %v (%T), want *stomp.Error", len(frames), err, err)
					}
					if want := "NUL byte in a header line"; !strings.Contains(se.Reason, want) || se.Limit != "" {
						t.Errorf("got reason %q limit %q, want a reason containing %q and no limit", se.Reason, se.Limit, want)
					}
					if len(frames) != 0 {
						t.Errorf("got %d frames before the error, want 0", len(frames))
					}
				})
			}
		}
	}
}

// TestReader_BodyNotAllocatedAhead checks that a content-length is not
// trusted with memory: a frame announcing 16 MiB whose stream ends after a
// few octets of body costs the reader far less than 16 MiB.
func TestReader_BodyNotAllocatedAhead(t *testing.T) {
	const announced = 16 << 20
	in := "SEND\ncontent-length:" + strconv.Itoa(announced) + "\n\nabc"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := stomp.NewReader(strings.NewReader(in), stomp.Limits{MaxBody: announced})
	if _, err := r.ReadFrame(); err != io.ErrUnexpectedEOF {
		t.Fatalf("got error %v, want io.ErrUnexpectedEOF", err)
	}
	runtime.ReadMemStats(&after)
	// The read buffer (64 KiB) and one body step (64 KiB), with room to spare.
	const bound = 1 << 20
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Errorf("got %d bytes allocated for a frame that announced %d and sent 3, want at most %d", got, announced, bound)
	}
}

// TestReader_OnFrameStart checks the hook runs once per frame, once its first
// octet has been read, and for the CR of a CRLF heart-beat, not for an LF one.
func TestReader_OnFrameStart(t *testing.T) {
	in := "\n\r\nSEND\n\nabc\x00MESSAGE\ncontent-length:1\n\nx\x00\n"
	r := stomp.NewReader(iotest.OneByteReader(strings.NewReader(in)), stomp.Limits{})
	var starts []int // frames decoded when each call came
	frames := 0
	r.OnFrameStart(func() { starts = append(starts, frames) })
	for {
		f, err := r.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("got error %v, want frames then io.EOF", err)
		}
		if f != nil {
			frames++
		}
	}
	if want := []int{0, 0, 1}; !reflect.DeepEqual(starts, want) {
		t.Errorf("got the hook called with %v frames decoded, want %v (CRLF, SEND, MESSAGE)", starts, want)
	}
}

// A frame costs three allocations whatever its headers, up to 256 bytes of
// header text (maxSharedText; past it each header is a string of its own):
// the frame (with room for its headers), one string holding all its header
// text (unknown keys and every value, unescaped), and the body. Values must still be
// their own: a later frame read into the same Reader leaves them alone.
func TestReader_OneStringPerFrame(t *testing.T) {
	one := stomp.Encode(stomp.NewFrame(stomp.CmdSend,
		"destination", "/topic/a",
		"bench-ts", "1234567890",
		"bench-seq", "42",
		"x-colon", "a:b\nc"), stomp.V12)
	r := repeatedReader(one, 200)
	first, err := r.ReadFrame()
	if err != nil || first == nil {
		t.Fatalf("got %v, %v", first, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if f, err := r.ReadFrame(); err != nil || f == nil {
			t.Fatalf("got %v, %v", f, err)
		}
	})
	if allocs > 3 {
		t.Fatalf("%.1f allocations per frame, want at most 3", allocs)
	}
	want := [][2]string{{"destination", "/topic/a"}, {"bench-ts", "1234567890"}, {"bench-seq", "42"}, {"x-colon", "a:b\nc"}}
	for i, h := range want {
		if first.Headers[i].Key != h[0] || first.Headers[i].Value != h[1] {
			t.Fatalf("header %d of the first frame after 100 more: %q, want %q", i, first.Headers[i], h)
		}
	}
}

// A MESSAGE as a broker sends it (eight headers with content-length) costs
// the same three allocations: the frame is sized once its headers are
// counted, not grown past a fixed room.
func TestReader_MessageThreeAllocations(t *testing.T) {
	for _, n := range []int{7, 12, 13} {
		kv := []string{"subscription", "0", "message-id", "1234567", "destination", "/queue/q",
			"ack", "1234567.1", "delivery-count", "1", "timestamp", "1764590000000"}
		for i := len(kv) / 2; i < n-1; i++ { // n-1: content-length is added
			kv = append(kv, "x-"+strconv.Itoa(i), "v")
		}
		f := stomp.NewFrame(stomp.CmdMessage, kv...)
		f.Body = make([]byte, 1024)
		one := stomp.Encode(f, stomp.V12)
		r := repeatedReader(one, 200)
		first, err := r.ReadFrame()
		if err != nil || first == nil {
			t.Fatalf("%d headers: got %v, %v", n, first, err)
		}
		if len(first.Headers) != n {
			t.Fatalf("%d headers: decoded %d", n, len(first.Headers))
		}
		allocs := testing.AllocsPerRun(100, func() {
			if f, err := r.ReadFrame(); err != nil || f == nil {
				t.Fatalf("got %v, %v", f, err)
			}
		})
		want := 3.0
		if n > 12 {
			want = 4 // the frame and its headers apart
		}
		if allocs > want {
			t.Errorf("%d headers: %.1f allocations per frame, want at most %v", n, allocs, want)
		}
		if got := first.Get("ack"); got != "1234567.1" {
			t.Errorf("%d headers: ack %q after 100 more frames, want 1234567.1", n, got)
		}
	}
}

// repeatedReader is a STOMP 1.2 Reader over n copies of the encoded frame one.
func repeatedReader(one []byte, n int) *stomp.Reader {
	stream := bytes.Repeat(one, n)
	r := stomp.NewReader(bytes.NewReader(stream), stomp.Limits{})
	r.SetVersion(stomp.V12)
	return r
}
