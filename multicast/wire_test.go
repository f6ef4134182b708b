package multicast

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// samplePackets are one datagram of each type, as in docs/multicast-protocol.md.
func samplePackets() []Packet {
	msg, _ := AppendMessage(nil, []Header{{"content-type", "text/plain"}, {"k", ""}}, []byte("42.5 1700000000"))
	return []Packet{
		{PacketHeader: PacketHeader{Type: TypeData, Session: 0x6567_0000_1234_5678, Seq: 7, Trailing: 1},
			Records: []Record{{Stream: 1, Seq: 3, Payload: msg}, {Stream: 2, Seq: 1, Payload: []byte{0, 0}}}},
		{PacketHeader: PacketHeader{Type: TypeRData, Flags: FlagRepair, Session: 9, Seq: 5, Trailing: 2},
			Records: []Record{{Stream: 4, Seq: 100, Payload: []byte{0, 0, 'x'}}}},
		{PacketHeader: PacketHeader{Type: TypeHeartbeat, Session: 9, Seq: 12, Trailing: 2}, Leading: 12,
			Streams: []StreamSeq{{1, 40}, {2, 7}}},
		{PacketHeader: PacketHeader{Type: TypeNAK, Session: 9, Seq: 3}, Receiver: 0xdeadbeef,
			Ranges: []Range{{3, 3}, {7, 9}}},
		{PacketHeader: PacketHeader{Type: TypeNCF, Session: 9, Seq: 12, Trailing: 2}, Status: NCFWillSend,
			Ranges: []Range{{7, 9}}},
		{PacketHeader: PacketHeader{Type: TypeNCF, Session: 9, Seq: 12, Trailing: 5}, Status: NCFGone,
			Ranges: []Range{{1, 4}}},
		{PacketHeader: PacketHeader{Type: TypeLoss, Session: 9, Seq: 12, Trailing: 5}, Reason: ReasonGone,
			Ranges: []Range{{1, 4}}},
		{PacketHeader: PacketHeader{Type: TypeCatalog, Session: 9, Seq: 1, Trailing: 1},
			Catalog: []CatalogEntry{{1, 1, "metrics.cpu"}, {2, 6, "orders.eu"}}},
		{PacketHeader: PacketHeader{Type: TypeHistoryRequest, Session: 9, Seq: 4}, Receiver: 0xdeadbeef,
			Before: 100, Count: 50, AgeMs: 60000, Patterns: []string{"metrics.>", "orders.*"}},
		{PacketHeader: PacketHeader{Type: TypeHistory, Session: 9, Seq: 120, Trailing: 5}, Receiver: 0xdeadbeef,
			Request: 4, Streams: []StreamSeq{{1, 33}, {2, 7}}, Ranges: []Range{{60, 70}, {90, 99}}},
	}
}

func TestWire_RoundTrip(t *testing.T) {
	for _, want := range samplePackets() {
		t.Run(want.Type.String(), func(t *testing.T) {
			b, err := AppendPacket(nil, &want)
			if err != nil {
				t.Fatal(err)
			}
			var got Packet
			if err := Decode(b, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			normalize(&got)
			normalize(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
			a := NewAuth([]byte("secret"), 7)
			sb := a.Sign(append([]byte(nil), b...))
			if !NewAuth([]byte("secret"), 7).Verify(sb) {
				t.Fatal("signed datagram does not verify")
			}
			if err := Decode(sb, &got); err != nil {
				t.Fatalf("decode signed: %v", err)
			}
			if got.KeyID != 7 || got.Flags&FlagAuth == 0 {
				t.Errorf("got key id %d flags %x, want 7 with FlagAuth", got.KeyID, got.Flags)
			}
			for i := range sb {
				c := append([]byte(nil), sb...)
				c[i] ^= 0x40
				if a.Verify(c) {
					t.Fatalf("tampered byte %d verifies", i)
				}
			}
			if NewAuth([]byte("other"), 7).Verify(sb) || NewAuth([]byte("secret"), 8).Verify(sb) || a.Verify(b) {
				t.Error("wrong key, wrong key id or missing tag verifies")
			}
		})
	}
}

func normalize(p *Packet) {
	for _, s := range []any{&p.Records, &p.Streams, &p.Ranges, &p.Catalog, &p.Patterns} {
		v := reflect.ValueOf(s).Elem()
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
	}
}

func TestWire_HeaderLayout(t *testing.T) {
	b, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeHeartbeat, Session: 0x0102030405060708, Seq: 0x1112, Trailing: 0x21}, Leading: 0x1112})
	want := []byte{'H', 'M', 1, 3, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 0x12, 0x11, 0, 0, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0, 0, 0,
		0x12, 0x11, 0, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Errorf("got % x, want % x", b, want)
	}
}

func TestWire_DecodeErrors(t *testing.T) {
	good, _ := AppendPacket(nil, &samplePackets()[3])
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short header", good[:HeaderSize-1], ErrShort},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), ErrMagic},
		{"version", mut(func(b []byte) []byte { b[2] = 2; return b }), ErrVersion},
		{"type", mut(func(b []byte) []byte { b[3] = 99; return b }), ErrType},
		{"reserved", mut(func(b []byte) []byte { b[7] = 1; return b }), ErrMalformed},
		{"truncated body", good[:len(good)-1], ErrShort},
		{"trailing bytes", append(append([]byte(nil), good...), 0), ErrMalformed},
		{"range backwards", mut(func(b []byte) []byte { b[HeaderSize+10] = 9; return b }), ErrMalformed},
		{"auth flag without room", mut(func(b []byte) []byte { b[4] = FlagAuth; return b[:HeaderSize+4] }), ErrShort},
		{"huge record count", func() []byte {
			b, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeData}})
			b[HeaderSize], b[HeaderSize+1] = 0xff, 0xff
			return b
		}(), ErrMalformed},
		{"record length past end", func() []byte {
			b, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeData}, Records: []Record{{Stream: 1, Seq: 1, Payload: []byte{0, 0}}}})
			b[HeaderSize+2+12] = 200
			return b
		}(), ErrShort},
	}
	hist := func(p Packet) []byte { b, _ := AppendPacket(nil, &p); return b }
	tests = append(tests, []struct {
		name string
		b    []byte
		want error
	}{
		{"history ranges not increasing", hist(Packet{PacketHeader: PacketHeader{Type: TypeHistory}, Ranges: []Range{{5, 9}, {9, 12}}}), ErrMalformed},
		{"history streams past the limit", func() []byte {
			b := hist(Packet{PacketHeader: PacketHeader{Type: TypeHistory}, Streams: make([]StreamSeq, MaxHistoryStreams+1)})
			return b
		}(), ErrMalformed},
		{"history request patterns past the limit", func() []byte {
			b := hist(Packet{PacketHeader: PacketHeader{Type: TypeHistoryRequest}, Patterns: []string{"a"}})
			b[HeaderSize+24] = MaxHistoryPatterns + 1
			return b
		}(), ErrMalformed},
		{"history request pattern past the end", func() []byte {
			b := hist(Packet{PacketHeader: PacketHeader{Type: TypeHistoryRequest}, Patterns: []string{"a"}})
			b[HeaderSize+26] = 9
			return b
		}(), ErrShort},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			err := Decode(tt.b, &p)
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMessage_RoundTrip(t *testing.T) {
	tests := []struct {
		headers []Header
		body    []byte
	}{
		{nil, nil},
		{nil, []byte("hello")},
		{[]Header{{"a", "1"}, {"", ""}, {"content-type", "application/json"}}, []byte(`{"v":1}`)},
	}
	for i, tt := range tests {
		b, err := AppendMessage(nil, tt.headers, tt.body)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != MessageSize(tt.headers, tt.body) {
			t.Errorf("%d: size %d, MessageSize %d", i, len(b), MessageSize(tt.headers, tt.body))
		}
		hs, body, err := DecodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != len(tt.headers) || !bytes.Equal(body, tt.body) {
			t.Errorf("%d: got %v %q, want %v %q", i, hs, body, tt.headers, tt.body)
		}
		for j := range hs {
			if hs[j] != tt.headers[j] {
				t.Errorf("%d: header %d got %v, want %v", i, j, hs[j], tt.headers[j])
			}
		}
	}
	if _, _, err := DecodeMessage([]byte{1, 0, 5, 0, 'a'}); !errors.Is(err, ErrMalformed) {
		t.Errorf("got %v, want %v", err, ErrMalformed)
	}
}

// FuzzDecode checks that no input panics the decoders and that whatever decodes re-encodes to a
// datagram that decodes the same.
func FuzzDecode(f *testing.F) {
	for _, b := range seedDatagrams() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := Decode(b, &p); err != nil {
			return
		}
		for _, r := range p.Records {
			DecodeMessage(r.Payload)
		}
		p.Flags &^= FlagAuth
		e, err := AppendPacket(nil, &p)
		if err != nil {
			return
		}
		var q Packet
		if err := Decode(e, &q); err != nil {
			t.Fatalf("re-encoded datagram does not decode: %v", err)
		}
		normalize(&p)
		normalize(&q)
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip: got %+v, want %+v", q, p)
		}
	})
}

func seedDatagrams() [][]byte {
	var out [][]byte
	a := NewAuth([]byte("k"), 1)
	for _, p := range samplePackets() {
		b, _ := AppendPacket(nil, &p)
		out = append(out, b, a.Sign(append([]byte(nil), b...)))
	}
	return out
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzDecode/seed-* from samplePackets when
// HERALD_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("HERALD_WRITE_CORPUS") != "1" {
		t.Skip("set HERALD_WRITE_CORPUS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range seedDatagrams() {
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFormatSession(t *testing.T) {
	if got, want := FormatSession(0xbeef), "000000000000beef"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
