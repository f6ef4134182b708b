package stomp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// Limits bound what a Reader accepts. Zero fields take the Default values.
type Limits struct {
	MaxHeaderBytes int // command line plus all header lines
	MaxHeaders     int // header lines per frame
	MaxHeaderLine  int // one header line
	MaxBody        int // body octets
}

// Default limits, generous for real clients and small enough that one
// connection cannot hold much memory.
const (
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxHeaders     = 128
	DefaultMaxHeaderLine  = 16 << 10
	DefaultMaxBody        = 16 << 20
)

func (l Limits) withDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxHeaderLine <= 0 {
		l.MaxHeaderLine = DefaultMaxHeaderLine
	}
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	return l
}

const maxCommandLen = 32

// Reader decodes frames from a byte stream.
type Reader struct {
	br      *bufio.Reader
	limits  Limits
	version string
	onStart func()
	onBody  func(n int)
	text    []byte // the header text of the frame being read
	spans   []span // where each of its headers is in text
}

// span is one header of the frame being read: key (interned) or
// text[k0:k1], and value text[v0:v1].
type span struct {
	key            string
	k0, k1, v0, v1 int
}

// maxKeptText is the most header text a Reader keeps room for between
// frames.
const maxKeptText = 64 << 10

// maxSharedText is the most header text whose headers share one string
// (one allocation for a frame's headers, the common case). Past it each
// header gets a string of its own: a string shared by every header lives
// as long as any of them, so a retained header (a queue message keeps some
// of a SEND's headers, a RECEIPT its receipt-id, a subscription its id)
// would hold every byte the frame's headers carried (up to
// max_header_bytes) while counted at its own size. 256 bytes is about the
// memory a message or frame costs beside its header bytes anyway.
const maxSharedText = 256

// NewReader returns a Reader over r with the given limits. The version is
// unknown (no escaping) until SetVersion is called after CONNECT.
func NewReader(r io.Reader, limits Limits) *Reader {
	limits = limits.withDefaults()
	size := 64 << 10
	if limits.MaxHeaderLine+2 > size {
		size = limits.MaxHeaderLine + 2
	}
	return &Reader{br: bufio.NewReaderSize(r, size), limits: limits}
}

// SetLimits replaces the limits for the frames read from now on (a
// configuration reload). A MaxHeaderLine above the read buffer's size (the
// larger of 64 KiB and the limit given to NewReader) is bounded by it.
func (r *Reader) SetLimits(limits Limits) { r.limits = limits.withDefaults() }

// SetVersion sets the negotiated protocol version, which decides escaping.
func (r *Reader) SetVersion(v string) { r.version = v }

// OnFrameStart sets fn to be called by ReadFrame once the first octet of a
// frame (or the CR of a CRLF heart-beat) has been read, before it waits for
// the rest: the caller can bound the time the whole frame may take.
func (r *Reader) OnFrameStart(fn func()) { r.onStart = fn }

// OnBody sets fn to be called by ReadFrame before it allocates n more
// octets for a body (as they arrive, see bodyStep), so that the caller can
// account for them, and wait: fn may block.
func (r *Reader) OnBody(fn func(n int)) { r.onBody = fn }

func (r *Reader) bodyGrows(n int) {
	if r.onBody != nil && n > 0 {
		r.onBody(n)
	}
}

// Buffered reports how many bytes are buffered but not yet decoded.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// FrameBuffered reports whether the buffered input holds a NUL octet: most
// likely the end of a whole frame, which ReadFrame can then decode without
// waiting for the network (a body may hold NULs: it is only a hint).
func (r *Reader) FrameBuffered() bool {
	n := r.br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.br.Peek(n)
	return bytes.IndexByte(b, 0) >= 0
}

// ReadFrame decodes the next frame. It returns (nil, nil) for a heart-beat
// (an EOL between frames), io.EOF on a clean end between frames,
// io.ErrUnexpectedEOF when the stream ends inside a frame, and *Error for
// malformed input or an exceeded limit.
func (r *Reader) ReadFrame() (*Frame, error) {
	b, err := r.br.ReadByte()
	if err != nil {
		return nil, err
	}
	switch b {
	case '\n':
		return nil, nil
	case '\r':
		if r.onStart != nil {
			r.onStart()
		}
		b2, err := r.br.ReadByte()
		if err != nil {
			return nil, eofInFrame(err)
		}
		if b2 != '\n' {
			return nil, errorf("stray carriage return between frames")
		}
		return nil, nil
	}
	if err := r.br.UnreadByte(); err != nil {
		return nil, err
	}
	if r.onStart != nil {
		r.onStart()
	}

	headerBytes := 0
	line, err := r.readLine(&headerBytes)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || len(line) > maxCommandLen {
		return nil, errorf("malformed command line")
	}
	for _, c := range line {
		if c < 'A' || c > 'Z' {
			return nil, errorf("malformed command line")
		}
	}
	cmd := command(line)
	escaped := Escaped(r.version, cmd)
	// Header text (keys not interned by knownKey, and every value) is
	// gathered in r.text and becomes one string for the whole frame: one
	// allocation instead of one or two per header.
	r.text, r.spans = r.text[:0], r.spans[:0]
	for {
		line, err := r.readLine(&headerBytes)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			break
		}
		if bytes.IndexByte(line, 0) >= 0 {
			// A NUL ends a frame: relayed inside a header, it would let the
			// sender forge frames for the subscribers.
			return nil, errorf("NUL byte in a header line (STOMP forbids NUL in headers)")
		}
		if len(r.spans) >= r.limits.MaxHeaders {
			return nil, limitErr("max_headers", r.limits.MaxHeaders, "too many headers (limit %d)", r.limits.MaxHeaders)
		}
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			return nil, errorf("header line without colon")
		}
		k, v := line[:i], line[i+1:]
		var sp span
		if !escaped || bytes.IndexByte(k, '\\') < 0 {
			if sp.key = knownKey(k); sp.key == "" {
				sp.k0 = len(r.text)
				r.text = append(r.text, k...)
				sp.k1 = len(r.text)
			}
		} else {
			sp.k0 = len(r.text)
			if r.text, err = appendUnescaped(r.text, k, r.version); err != nil {
				return nil, err
			}
			sp.k1 = len(r.text)
		}
		sp.v0 = len(r.text)
		if escaped {
			if r.text, err = appendUnescaped(r.text, v, r.version); err != nil {
				return nil, err
			}
		} else {
			r.text = append(r.text, v...)
		}
		sp.v1 = len(r.text)
		r.spans = append(r.spans, sp)
	}
	f := newFrame(len(r.spans))
	f.Command = cmd
	if len(r.text) <= maxSharedText {
		text := string(r.text)
		for _, sp := range r.spans {
			key := sp.key
			if key == "" {
				key = text[sp.k0:sp.k1]
			}
			f.Headers = append(f.Headers, Header{Key: key, Value: text[sp.v0:sp.v1]})
		}
	} else {
		// Each header a string of its own: what outlives the frame (a
		// message's kept headers, a receipt-id, a subscription id) holds
		// only itself, not every header the frame carried.
		for _, sp := range r.spans {
			if sp.key != "" {
				f.Headers = append(f.Headers, Header{Key: sp.key, Value: string(r.text[sp.v0:sp.v1])})
				continue
			}
			// Key and value are adjacent in r.text: one string for both.
			kv := string(r.text[sp.k0:sp.v1])
			f.Headers = append(f.Headers, Header{Key: kv[:sp.k1-sp.k0], Value: kv[sp.v0-sp.k0:]})
		}
	}
	if cap(r.text) > maxKeptText {
		r.text = nil
	}

	n, err := f.ContentLength()
	if err != nil {
		return nil, err
	}
	if n >= 0 {
		if n > r.limits.MaxBody {
			return nil, limitErr("max_body", r.limits.MaxBody, "body of %d bytes exceeds the limit of %d", n, r.limits.MaxBody)
		}
		if f.Body, err = r.readBody(n); err != nil {
			return nil, err
		}
		b, err := r.br.ReadByte()
		if err != nil {
			return nil, eofInFrame(err)
		}
		if b != 0 {
			return nil, errorf("frame not terminated by NUL after content-length octets")
		}
		return f, nil
	}
	// Without a content-length the body is what comes before the next
	// NUL: it arrives in parts of at most the read buffer, each copied as
	// it comes; a body longer than one part is then copied into one
	// buffer of its size (an appended slice would keep spare capacity that
	// is counted nowhere once a queue holds the body).
	var parts [][]byte
	got := 0
	for {
		chunk, err := r.br.ReadSlice(0)
		if got+len(chunk) > r.limits.MaxBody+1 {
			return nil, limitErr("max_body", r.limits.MaxBody, "body exceeds the limit of %d bytes", r.limits.MaxBody)
		}
		if err == nil {
			last := chunk[:len(chunk)-1]
			if parts == nil {
				r.bodyGrows(len(last))
				f.Body = append(make([]byte, 0, len(last)), last...)
				return f, nil
			}
			// The whole body, while its parts are still allocated.
			r.bodyGrows(got + len(last))
			body := make([]byte, 0, got+len(last))
			for _, p := range parts {
				body = append(body, p...)
			}
			f.Body = append(body, last...)
			return f, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, eofInFrame(err)
		}
		// chunk is the reader's buffer: copy it before waiting in onBody.
		parts = append(parts, append([]byte(nil), chunk...))
		got += len(chunk)
		r.bodyGrows(len(chunk))
	}
}

// newFrame allocates a frame with room for n headers, in one allocation
// for the sizes real frames have (a SEND carries a few headers, a MESSAGE
// from a broker seven to ten).
func newFrame(n int) *Frame {
	switch {
	case n <= 6:
		fh := &struct {
			f Frame
			h [6]Header
		}{}
		fh.f.Headers = fh.h[:0]
		return &fh.f
	case n <= 12:
		fh := &struct {
			f Frame
			h [12]Header
		}{}
		fh.f.Headers = fh.h[:0]
		return &fh.f
	}
	return &Frame{Headers: make(Headers, 0, n)}
}

// bodyStep is the most a body buffer is allocated ahead of the octets that
// have arrived: a content-length is only a claim, so a body grows as it is
// received and a peer that announces 16 MiB and sends nothing holds
// bodyStep, not 16 MiB.
const bodyStep = 64 << 10

// readBody reads a body of n octets (n is within MaxBody).
//
// A body longer than bodyStep is read into parts, each allocated once the
// ones before it have arrived and at most as large as they are together,
// until they hold half the body; then into one buffer of n octets, which
// takes the parts and the rest. What is allocated is at most twice what
// has arrived, and at most twice n in all, all of it charged through
// onBody: the parts stay allocated until the garbage collector frees
// them. (Growing one buffer by doubling allocated up to three times n,
// and was charged n.)
func (r *Reader) readBody(n int) ([]byte, error) {
	if n <= bodyStep {
		r.bodyGrows(n)
		body := make([]byte, n)
		if _, err := io.ReadFull(r.br, body); err != nil {
			return nil, eofInFrame(err)
		}
		return body, nil
	}
	var parts [][]byte
	got := 0
	for size := bodyStep; n-got > got; size = min(got, n-got) {
		r.bodyGrows(size)
		p := make([]byte, size)
		if _, err := io.ReadFull(r.br, p); err != nil {
			return nil, eofInFrame(err)
		}
		parts = append(parts, p)
		got += size
	}
	r.bodyGrows(n)
	body := make([]byte, n)
	off := 0
	for _, p := range parts {
		off += copy(body[off:], p)
	}
	if _, err := io.ReadFull(r.br, body[off:]); err != nil {
		return nil, eofInFrame(err)
	}
	return body, nil
}

// readLine reads one header-section line without its EOL, counting bytes
// against the header limits.
func (r *Reader) readLine(total *int) ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, limitErr("max_header_line", r.limits.MaxHeaderLine, "header line longer than %d bytes", r.limits.MaxHeaderLine)
		}
		return nil, eofInFrame(err)
	}
	*total += len(line)
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	// The EOL (LF or CRLF) does not count against MaxHeaderLine.
	if len(line) > r.limits.MaxHeaderLine {
		return nil, limitErr("max_header_line", r.limits.MaxHeaderLine, "header line longer than %d bytes", r.limits.MaxHeaderLine)
	}
	if *total > r.limits.MaxHeaderBytes {
		return nil, limitErr("max_header_bytes", r.limits.MaxHeaderBytes, "headers longer than %d bytes", r.limits.MaxHeaderBytes)
	}
	return line, nil
}

func eofInFrame(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendUnescaped appends header text b with its escape sequences decoded
// (STOMP 1.1 and 1.2; \r only in 1.2). An undefined sequence is an error.
func appendUnescaped(out, b []byte, version string) ([]byte, error) {
	if bytes.IndexByte(b, '\\') < 0 {
		return append(out, b...), nil
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(b) {
			return out, errorf("header ends inside an escape sequence")
		}
		switch b[i] {
		case 'n':
			out = append(out, '\n')
		case 'c':
			out = append(out, ':')
		case '\\':
			out = append(out, '\\')
		case 'r':
			if version != V12 {
				return out, errorf("undefined escape sequence \\r in STOMP %s", version)
			}
			out = append(out, '\r')
		default:
			return out, errorf("undefined escape sequence %s", strconv.Quote("\\"+string(b[i])))
		}
	}
	return out, nil
}

// command returns the frame command b as a string without allocating for
// the commands STOMP defines (the compiler does not copy b to compare it).
func command(b []byte) string {
	switch string(b) {
	case CmdAck:
		return CmdAck
	case CmdNack:
		return CmdNack
	case CmdSend:
		return CmdSend
	case CmdMessage:
		return CmdMessage
	case CmdReceipt:
		return CmdReceipt
	case CmdSubscribe:
		return CmdSubscribe
	case CmdUnsubscribe:
		return CmdUnsubscribe
	}
	return string(b)
}

// knownKey returns header name b as an interned string for the names most
// frames carry, and "" for any other (no allocation either way).
func knownKey(b []byte) string {
	switch string(b) {
	case "id":
		return "id"
	case "ack":
		return "ack"
	case "subscription":
		return "subscription"
	case "message-id":
		return "message-id"
	case "destination":
		return "destination"
	case "receipt":
		return "receipt"
	case "receipt-id":
		return "receipt-id"
	case "content-length":
		return "content-length"
	case "content-type":
		return "content-type"
	case "delivery-count":
		return "delivery-count"
	case "redelivered":
		return "redelivered"
	case "persistent":
		return "persistent"
	case "transaction":
		return "transaction"
	}
	return ""
}
