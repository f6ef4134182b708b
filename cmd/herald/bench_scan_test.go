package main

import (
	"bufio"
	"bytes"
	"strconv"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// FuzzBenchScan feeds benchScan arbitrary bytes (it must not panic) and
// checks it against stomp.Reader: for every frame the reader decodes from
// the same input, benchScan sees the same command and the same first
// bench-ts and bench-seq values.
func FuzzBenchScan(f *testing.F) {
	msg := func(ts, seq string, body string) string {
		return "MESSAGE\nsubscription:0\nmessage-id:t1\ndestination:/topic/bench\nbench-ts:" + ts + "\nbench-seq:" + seq + "\ncontent-length:" + strconv.Itoa(len(body)) + "\n\n" + body + "\x00"
	}
	f.Add([]byte(msg("1700000000000000000", "1", "abc")))
	f.Add([]byte("\n\r\n" + msg("5", "6", "a\x00b") + msg("7", "8", "")))
	f.Add([]byte("MESSAGE\nbench-ts:1\nbench-seq:2\nbench-seq:3\n\nno length\x00"))
	f.Add([]byte("ERROR\nmessage:slow consumer\n\nbody\x00"))
	f.Add([]byte("MESSAGE\nbench-ts:x\nbench-ts:1\nbench-seq:2\n\n\x00"))
	f.Add([]byte("RECEIPT\nreceipt-id:sub\n\n\x00MESSAGE\r\nbench-ts:9\r\nbench-seq:10\r\n\r\n\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// benchScan alone: no panic, whatever the input.
		br := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
		var sc benchScan
		for i := 0; i < 1000 && sc.next(br) == nil; i++ {
		}
		// Against the reader, for input it decodes: frames of the
		// bench's shape (no escapes in the headers benchScan reads).
		r := stomp.NewReader(bytes.NewReader(data), stomp.Limits{})
		r.SetVersion(stomp.V12)
		br = bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
		for {
			fr, err := r.ReadFrame()
			if err != nil {
				return
			}
			if fr == nil {
				continue // heart-beat: benchScan skips it with the next frame
			}
			if bytes.ContainsAny(data, "\\") {
				return // escapes: benchScan reads raw values
			}
			if err := sc.next(br); err != nil {
				t.Fatalf("reader decoded %s %v, benchScan failed: %v", fr.Command, fr.Headers, err)
			}
			if sc.isMessage != (fr.Command == stomp.CmdMessage) || sc.isError != (fr.Command == stomp.CmdError) {
				t.Fatalf("reader %s, benchScan message=%v error=%v", fr.Command, sc.isMessage, sc.isError)
			}
			ts, err1 := strconv.ParseInt(fr.Get(benchTSHeader), 10, 64)
			seq, err2 := strconv.ParseInt(fr.Get(benchSeqHeader), 10, 64)
			ok := err1 == nil && err2 == nil
			if ok != sc.ok || ok && (ts != sc.ts || seq != sc.seq) {
				t.Fatalf("reader ts %d seq %d ok %v, benchScan ts %d seq %d ok %v", ts, seq, ok, sc.ts, sc.seq, sc.ok)
			}
		}
	})
}

// parseBenchInt agrees with strconv.ParseInt on every input, the edges of
// its fast path (18 and 19 digits, the int64 limit) included.
func FuzzParseBenchInt(f *testing.F) {
	for _, s := range []string{"0", "1764660000000000000", "9223372036854775807", "9223372036854775808",
		"9999999999999999999", "99999999999999999999", "-5", "+5", "", "12a", "000000000000000000001"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		want, err := strconv.ParseInt(string(v), 10, 64)
		got, ok := parseBenchInt(v)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseBenchInt(%q) = %d, %v; ParseInt: %d, %v", v, got, ok, want, err)
		}
	})
}

// natsMsgSize reads the byte count and field count of a MSG line as
// strings.Fields and strconv.Atoi did before it.
func TestNatsMsgSize(t *testing.T) {
	for _, c := range []struct {
		line      string
		n, fields int
	}{
		{"MSG bench 1 128", 128, 4},
		{"MSG bench 1 _INBOX.x 16", 16, 5},
		{"MSG  bench\t1   0 ", 0, 4},
		{"MSG bench 1 12x", -1, 4},
		{"MSG bench", -1, 2},
		{"MSG bench 1 1234567890", -1, 4},
	} {
		n, f := natsMsgSize([]byte(c.line))
		if n != c.n || f != c.fields {
			t.Errorf("natsMsgSize(%q) = %d, %d fields; want %d, %d", c.line, n, f, c.n, c.fields)
		}
	}
}
