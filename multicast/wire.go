package multicast

import (
	"encoding/binary"
	"fmt"
)

// Wire constants. The format is specified in docs/multicast-protocol.md; this file is its reference codec.
const (
	Version        = 1
	HeaderSize     = 32 // fixed header of every datagram
	RecordHeader   = 16 // stream id u32, stream seq u64, length u32
	MaxDatagram    = 65507
	magic0, magic1 = 'H', 'M'
)

// Flags (header byte 4).
const (
	FlagAuth   = 1 << 0 // a truncated HMAC-SHA256 tag of TagSize bytes ends the datagram
	FlagRepair = 1 << 1 // the datagram is a retransmission (always set on RDATA, also on repaired CATALOG)
	// FlagFragment marks a DATA or RDATA datagram whose record is a fragment of a message too
	// large for one datagram (revision 3): its record length has FragmentBit set and its payload
	// starts with u32 total, u32 offset. A receiver of revision 2 drops such a datagram (an
	// unknown flag), so it reports the message as a gap and never misreads it.
	FlagFragment = 1 << 2
	// FlagSealed marks a sealed datagram (section 6, "Sealing"): after the header, a u64 seal
	// counter, then the body encrypted with XChaCha20-Poly1305 and its 16-byte tag. FlagAuth is
	// not set on it (the AEAD authenticates the header). Decode returns ErrSealed: open it first.
	FlagSealed = 1 << 3
	// KnownFlags are the flags this version defines. Decode rejects a datagram with any other
	// bit set: a flag may change the meaning of the body, so it is never guessed at.
	KnownFlags = FlagAuth | FlagRepair | FlagFragment | FlagSealed
)

// Fragments (docs/multicast-protocol.md, section 2, "Fragments").
const (
	// FragmentBit in a record's u32 length marks a fragment; the other 31 bits are the length.
	FragmentBit = 1 << 31
	// FragmentHeader is the u32 total, u32 offset that starts a fragment's payload.
	FragmentHeader = 8
	// MaxMessage is the largest message (encoded headers and body) a sender fragments and a
	// receiver reassembles: 16 MiB of body (stomp.max_body_bytes' default) plus 64 KiB of
	// headers. A fragment claiming a larger total is forged.
	MaxMessage = 16<<20 + 64<<10
)

// Type is the datagram type (header byte 3).
type Type uint8

// Datagram types.
const (
	TypeData      Type = 1 // sender -> group: records, consumes a sequence number
	TypeRData     Type = 2 // sender -> group: a repair of a DATA datagram, same sequence number
	TypeHeartbeat Type = 3 // sender -> group: leading edge and last stream sequences
	TypeNAK       Type = 4 // receiver -> sender (unicast): ranges of missing sequences
	TypeNCF       Type = 5 // sender -> group: NAK confirm (will send / delayed / gone)
	TypeLoss      Type = 6 // sender -> group: ranges that cannot be repaired
	TypeCatalog   Type = 7 // sender -> group: stream id to topic, consumes a sequence number
	// TypeHistoryRequest (revision 4): receiver -> sender (unicast): a late-joining receiver
	// asks which datagrams before its join point hold the last messages of its topics.
	TypeHistoryRequest Type = 8
	// TypeHistory (revision 4): sender -> group: the answer to one receiver's history request:
	// where each stream starts and which datagrams to NAK for it.
	TypeHistory Type = 9
)

// History request limits (docs/multicast-protocol.md, section 3, "History (late join)").
const (
	// MaxHistoryStreams is the most streams one HISTORY answer names (the most recently active).
	MaxHistoryStreams = 64
	// MaxHistoryPatterns is the most topic patterns one history request carries.
	MaxHistoryPatterns = 16
)

func (t Type) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeRData:
		return "RDATA"
	case TypeHeartbeat:
		return "HEARTBEAT"
	case TypeNAK:
		return "NAK"
	case TypeNCF:
		return "NCF"
	case TypeLoss:
		return "LOSS"
	case TypeCatalog:
		return "CATALOG"
	case TypeHistoryRequest:
		return "HISTORY-REQUEST"
	case TypeHistory:
		return "HISTORY"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Sequenced reports whether datagrams of this type consume a datagram sequence number and are repairable.
func (t Type) Sequenced() bool { return t == TypeData || t == TypeRData || t == TypeCatalog }

// NCFStatus is the answer an NCF gives to a NAK.
type NCFStatus uint8

// NCF statuses.
const (
	NCFWillSend NCFStatus = 1 // the repair follows at once
	NCFDelayed  NCFStatus = 2 // the repair is queued behind the repair rate budget
	NCFGone     NCFStatus = 3 // outside the retransmit window: never coming
)

// Reason says why a range of messages was lost.
type Reason uint8

// Gap reasons.
const (
	ReasonExpired        Reason = 1 // the receiver gave up after its retries or its latency budget
	ReasonGone           Reason = 2 // the sender no longer holds the data (outside its window)
	ReasonSessionRestart Reason = 3 // the sender restarted; the old session's tail is lost
	ReasonSlowConsumer   Reason = 4 // the application did not read events fast enough
)

func (r Reason) String() string {
	switch r {
	case ReasonExpired:
		return "expired"
	case ReasonGone:
		return "gone"
	case ReasonSessionRestart:
		return "session-restart"
	case ReasonSlowConsumer:
		return "slow-consumer"
	}
	return fmt.Sprintf("reason-%d", uint8(r))
}

// PacketHeader is the fixed 32-byte header of every datagram.
type PacketHeader struct {
	Type    Type
	Flags   uint8
	KeyID   uint8
	Session uint64 // sender session id; a NAK carries the session it asks about
	// Seq is the datagram sequence for DATA, RDATA and CATALOG; the sender's leading edge for
	// HEARTBEAT, NCF and LOSS; the receiver's own NAK counter (strictly increasing) for NAK.
	Seq      uint64
	Trailing uint64 // oldest sequence the sender can still repair (0 in a NAK)
}

// Record is one message, or one fragment of a message, inside a DATA or RDATA datagram.
type Record struct {
	Stream  uint32
	Seq     uint64 // stream sequence, from 1, contiguous per stream within a session
	Payload []byte // see AppendMessage; for a fragment, its bytes of the message
	// Frag marks a fragment: Payload is message[Offset:Offset+len(Payload)] of a message of
	// Total bytes; every fragment of the message has the same stream sequence.
	Frag          bool
	Total, Offset uint32
}

// Range is an inclusive range of sequences.
type Range struct{ From, To uint64 }

// Contains reports whether s is in r.
func (r Range) Contains(s uint64) bool { return s >= r.From && s <= r.To }

// StreamSeq names the last stream sequence sent on a stream.
type StreamSeq struct {
	Stream uint32
	Seq    uint64
}

// CatalogEntry maps a stream id to its topic.
type CatalogEntry struct {
	Stream uint32
	First  uint64 // the stream's first record is in this datagram sequence or a later one
	Topic  string
}

// Packet is a decoded datagram. Which fields are used depends on Type.
type Packet struct {
	PacketHeader
	Records  []Record       // DATA, RDATA
	Leading  uint64         // HEARTBEAT: highest sequence sent
	Streams  []StreamSeq    // HEARTBEAT
	Receiver uint64         // NAK: random receiver id
	Status   NCFStatus      // NCF
	Reason   Reason         // LOSS
	Ranges   []Range        // NAK, NCF, LOSS
	Catalog  []CatalogEntry // CATALOG
	// History request (TypeHistoryRequest): Receiver is the receiver id; Before the receiver's
	// join point (only datagrams below it); Count the last messages per stream (0: no count
	// limit); AgeMs the oldest message's age in milliseconds (0: no age limit); Patterns the
	// topic patterns (none: every topic).
	Before   uint64
	Count    uint32
	AgeMs    uint32
	Patterns []string
	// History answer (TypeHistory): Receiver and Request (the NAK counter of the request it
	// answers); Streams as (stream id, first stream sequence to deliver); Ranges the datagram
	// sequences below the request's Before that hold those streams' records from there on.
	Request uint64
}

// appendHeader appends the fixed header.
func appendHeader(dst []byte, h *PacketHeader) []byte {
	dst = append(dst, magic0, magic1, Version, byte(h.Type), h.Flags, h.KeyID, 0, 0)
	dst = binary.LittleEndian.AppendUint64(dst, h.Session)
	dst = binary.LittleEndian.AppendUint64(dst, h.Seq)
	return binary.LittleEndian.AppendUint64(dst, h.Trailing)
}

// putHeaderFields rewrites type, flags, key id and trailing edge of an encoded datagram in place.
func putHeaderFields(b []byte, t Type, flags, keyID uint8, trailing uint64) {
	b[3], b[4], b[5] = byte(t), flags, keyID
	binary.LittleEndian.PutUint64(b[24:], trailing)
}

// AppendPacket appends the encoding of p (without any HMAC tag; see Auth.Sign) to dst.
func AppendPacket(dst []byte, p *Packet) ([]byte, error) {
	h := p.PacketHeader
	h.Flags &^= FlagAuth
	dst = appendHeader(dst, &h)
	switch p.Type {
	case TypeData, TypeRData:
		if len(p.Records) > 0xffff {
			return dst, fmt.Errorf("%d records: %w", len(p.Records), ErrTooLarge)
		}
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p.Records)))
		for _, r := range p.Records {
			if r.Frag {
				dst = appendFragment(dst, r.Stream, r.Seq, r.Total, r.Offset, r.Payload)
			} else {
				dst = appendRecord(dst, r.Stream, r.Seq, r.Payload)
			}
		}
	case TypeHeartbeat:
		dst = binary.LittleEndian.AppendUint64(dst, p.Leading)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p.Streams)))
		for _, s := range p.Streams {
			dst = binary.LittleEndian.AppendUint32(dst, s.Stream)
			dst = binary.LittleEndian.AppendUint64(dst, s.Seq)
		}
	case TypeNAK:
		dst = binary.LittleEndian.AppendUint64(dst, p.Receiver)
		dst = appendRanges(dst, p.Ranges)
	case TypeNCF:
		dst = append(dst, byte(p.Status))
		dst = appendRanges(dst, p.Ranges)
	case TypeLoss:
		dst = append(dst, byte(p.Reason))
		dst = appendRanges(dst, p.Ranges)
	case TypeCatalog:
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p.Catalog)))
		for _, c := range p.Catalog {
			if len(c.Topic) > 0xffff {
				return dst, fmt.Errorf("topic %.32q: %w", c.Topic, ErrTooLarge)
			}
			dst = binary.LittleEndian.AppendUint32(dst, c.Stream)
			dst = binary.LittleEndian.AppendUint64(dst, c.First)
			dst = binary.LittleEndian.AppendUint16(dst, uint16(len(c.Topic)))
			dst = append(dst, c.Topic...)
		}
	case TypeHistoryRequest:
		if len(p.Patterns) > MaxHistoryPatterns {
			return dst, fmt.Errorf("%d history patterns (at most %d): %w", len(p.Patterns), MaxHistoryPatterns, ErrTooLarge)
		}
		dst = binary.LittleEndian.AppendUint64(dst, p.Receiver)
		dst = binary.LittleEndian.AppendUint64(dst, p.Before)
		dst = binary.LittleEndian.AppendUint32(dst, p.Count)
		dst = binary.LittleEndian.AppendUint32(dst, p.AgeMs)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p.Patterns)))
		for _, t := range p.Patterns {
			if len(t) > 0xffff {
				return dst, fmt.Errorf("pattern %.32q: %w", t, ErrTooLarge)
			}
			dst = binary.LittleEndian.AppendUint16(dst, uint16(len(t)))
			dst = append(dst, t...)
		}
	case TypeHistory:
		dst = binary.LittleEndian.AppendUint64(dst, p.Receiver)
		dst = binary.LittleEndian.AppendUint64(dst, p.Request)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p.Streams)))
		for _, s := range p.Streams {
			dst = binary.LittleEndian.AppendUint32(dst, s.Stream)
			dst = binary.LittleEndian.AppendUint64(dst, s.Seq)
		}
		dst = appendRanges(dst, p.Ranges)
	default:
		return dst, fmt.Errorf("encode %v: %w", p.Type, ErrType)
	}
	return dst, nil
}

func appendRecord(dst []byte, stream uint32, seq uint64, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, stream)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// appendFragment appends a fragment record: the length has FragmentBit set and counts the
// fragment header.
func appendFragment(dst []byte, stream uint32, seq uint64, total, offset uint32, data []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, stream)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(FragmentHeader+len(data))|FragmentBit)
	dst = binary.LittleEndian.AppendUint32(dst, total)
	dst = binary.LittleEndian.AppendUint32(dst, offset)
	return append(dst, data...)
}

func appendRanges(dst []byte, rs []Range) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(rs)))
	for _, r := range rs {
		dst = binary.LittleEndian.AppendUint64(dst, r.From)
		dst = binary.LittleEndian.AppendUint64(dst, r.To)
	}
	return dst
}

// DecodeHeader decodes the fixed header of b.
func DecodeHeader(b []byte) (PacketHeader, error) {
	var h PacketHeader
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%d bytes: %w", len(b), ErrShort)
	}
	if b[0] != magic0 || b[1] != magic1 {
		return h, ErrMagic
	}
	if b[2] != Version {
		return h, fmt.Errorf("version %d: %w", b[2], ErrVersion)
	}
	h.Type, h.Flags, h.KeyID = Type(b[3]), b[4], b[5]
	if b[6] != 0 || b[7] != 0 {
		return h, fmt.Errorf("reserved header bytes: %w", ErrMalformed)
	}
	if h.Flags&^KnownFlags != 0 {
		return h, fmt.Errorf("unknown flags %#02x: %w", h.Flags&^KnownFlags, ErrMalformed)
	}
	h.Session = binary.LittleEndian.Uint64(b[8:])
	h.Seq = binary.LittleEndian.Uint64(b[16:])
	h.Trailing = binary.LittleEndian.Uint64(b[24:])
	return h, nil
}

// Decode decodes b into p, reusing p's slices. Record payloads alias b. If the FlagAuth bit is
// set, the last TagSize bytes are the tag and are skipped here (check them with Auth.Verify first).
// Trailing bytes after the body are an error.
func Decode(b []byte, p *Packet) error {
	h, err := DecodeHeader(b)
	if err != nil {
		return err
	}
	if h.Flags&FlagAuth != 0 {
		if len(b) < HeaderSize+TagSize {
			return fmt.Errorf("tag: %w", ErrShort)
		}
		b = b[:len(b)-TagSize]
	}
	if h.Flags&FlagSealed != 0 {
		return ErrSealed
	}
	if h.Flags&FlagFragment != 0 && h.Type != TypeData && h.Type != TypeRData {
		return fmt.Errorf("fragment flag on %v: %w", h.Type, ErrMalformed)
	}
	*p = Packet{PacketHeader: h, Records: p.Records[:0], Streams: p.Streams[:0], Ranges: p.Ranges[:0], Catalog: p.Catalog[:0], Patterns: p.Patterns[:0]}
	d := decoder{b: b[HeaderSize:]}
	switch h.Type {
	case TypeData, TypeRData:
		n := int(d.u16())
		if n > len(d.b)/RecordHeader {
			return fmt.Errorf("%v with %d records in %d bytes: %w", h.Type, n, len(d.b), ErrMalformed)
		}
		for i := 0; i < n; i++ {
			r := Record{Stream: d.u32(), Seq: d.u64()}
			l := d.u32()
			if l&FragmentBit != 0 {
				// A fragment: only in a datagram marked FlagFragment, with its u32 total and
				// offset. Whether they make sense is the receiver's to judge (a forged fragment).
				if h.Flags&FlagFragment == 0 {
					return fmt.Errorf("%v fragment record without the fragment flag: %w", h.Type, ErrMalformed)
				}
				l &^= FragmentBit
				if l < FragmentHeader {
					return fmt.Errorf("%v fragment record of %d bytes: %w", h.Type, l, ErrMalformed)
				}
				r.Frag = true
				r.Total, r.Offset = d.u32(), d.u32()
				l -= FragmentHeader
			}
			r.Payload = d.bytes(l)
			if d.bad {
				break
			}
			p.Records = append(p.Records, r)
		}
	case TypeHeartbeat:
		p.Leading = d.u64()
		n := int(d.u16())
		if n > len(d.b)/12 {
			return fmt.Errorf("HEARTBEAT with %d streams in %d bytes: %w", n, len(d.b), ErrMalformed)
		}
		for i := 0; i < n; i++ {
			p.Streams = append(p.Streams, StreamSeq{Stream: d.u32(), Seq: d.u64()})
		}
		if !d.bad && p.Leading != h.Seq {
			return fmt.Errorf("HEARTBEAT leading edge %d in the body, %d in the header: %w", p.Leading, h.Seq, ErrMalformed)
		}
	case TypeNAK:
		p.Receiver = d.u64()
		p.Ranges = d.ranges(p.Ranges)
	case TypeNCF:
		p.Status = NCFStatus(d.u8())
		p.Ranges = d.ranges(p.Ranges)
		if !d.bad && (p.Status < NCFWillSend || p.Status > NCFGone) {
			return fmt.Errorf("NCF status %d: %w", p.Status, ErrMalformed)
		}
	case TypeLoss:
		p.Reason = Reason(d.u8())
		p.Ranges = d.ranges(p.Ranges)
	case TypeCatalog:
		n := int(d.u16())
		if n > len(d.b)/14 {
			return fmt.Errorf("CATALOG with %d entries in %d bytes: %w", n, len(d.b), ErrMalformed)
		}
		for i := 0; i < n && !d.bad; i++ {
			id, first := d.u32(), d.u64()
			t := d.bytes(uint32(d.u16()))
			if d.bad {
				break
			}
			p.Catalog = append(p.Catalog, CatalogEntry{Stream: id, First: first, Topic: string(t)})
		}
	case TypeHistoryRequest:
		p.Receiver, p.Before = d.u64(), d.u64()
		p.Count, p.AgeMs = d.u32(), d.u32()
		n := int(d.u16())
		if n > MaxHistoryPatterns || n > len(d.b)/2 {
			return fmt.Errorf("HISTORY-REQUEST with %d patterns in %d bytes (at most %d): %w", n, len(d.b), MaxHistoryPatterns, ErrMalformed)
		}
		for i := 0; i < n && !d.bad; i++ {
			t := d.bytes(uint32(d.u16()))
			if d.bad {
				break
			}
			p.Patterns = append(p.Patterns, string(t))
		}
	case TypeHistory:
		p.Receiver, p.Request = d.u64(), d.u64()
		n := int(d.u16())
		if n > MaxHistoryStreams || n > len(d.b)/12 {
			return fmt.Errorf("HISTORY with %d streams in %d bytes (at most %d): %w", n, len(d.b), MaxHistoryStreams, ErrMalformed)
		}
		for i := 0; i < n; i++ {
			p.Streams = append(p.Streams, StreamSeq{Stream: d.u32(), Seq: d.u64()})
		}
		p.Ranges = d.ranges(p.Ranges)
		if !d.bad {
			for i, r := range p.Ranges {
				if i > 0 && r.From <= p.Ranges[i-1].To {
					return fmt.Errorf("HISTORY ranges not increasing: %w", ErrMalformed)
				}
			}
		}
	default:
		return fmt.Errorf("type %d: %w", uint8(h.Type), ErrType)
	}
	if d.bad {
		return fmt.Errorf("%v body: %w", h.Type, ErrShort)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%v: %d trailing bytes: %w", h.Type, len(d.b), ErrMalformed)
	}
	for _, r := range p.Ranges {
		if r.From > r.To {
			return fmt.Errorf("%v range %d-%d: %w", h.Type, r.From, r.To, ErrMalformed)
		}
	}
	return nil
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) need(n int) bool {
	if d.bad || len(d.b) < n {
		d.bad = true
		return false
	}
	return true
}

func (d *decoder) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes(n uint32) []byte {
	if uint64(n) > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	if !d.need(int(n)) {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) ranges(dst []Range) []Range {
	n := int(d.u16())
	if n > len(d.b)/16 {
		d.bad = true
		return dst
	}
	for i := 0; i < n; i++ {
		dst = append(dst, Range{From: d.u64(), To: d.u64()})
	}
	return dst
}
