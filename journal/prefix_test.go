package journal

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TestStore_LoadPrefix reads bodies cut at maxBody, compressed or not, with
// their whole lengths, and whole bodies with maxBody -1.
func TestStore_LoadPrefix(t *testing.T) {
	s := mustOpen(t, Config{Compress: true})
	random := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	text := bytes.Repeat([]byte("compressible text "), 60000)
	bodies := [][]byte{random, text, []byte("short")}
	ops := make([]appliance.Op, len(bodies))
	for i, b := range bodies {
		ops[i] = appliance.Op{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: "q", Body: b, Headers: []stomp.Header{{Key: "k", Value: "v"}}}}
	}
	if _, err := apply(t, s, ops...); err != nil {
		t.Fatal(err)
	}
	var flags []int
	rows, err := s.db.Query(`SELECT flags FROM messages ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var f int
		rows.Scan(&f)
		flags = append(flags, f)
	}
	rows.Close()
	if len(flags) != 3 || flags[0]&flagZstd != 0 || flags[1]&flagZstd == 0 {
		t.Fatalf("flags: got %v, want the random body stored raw and the text compressed", flags)
	}
	for _, maxBody := range []int{0, 100, 70000, -1} {
		i := 0
		err := s.LoadPrefix(context.Background(), "q", 0, 10, maxBody, func(m *appliance.Message, bodyBytes int) error {
			want := bodies[i]
			if maxBody >= 0 && len(want) > maxBody {
				want = want[:maxBody]
			}
			if !bytes.Equal(m.Body, want) {
				t.Errorf("maxBody %d message %d: got a body of %d bytes, want %d (a prefix of the body)", maxBody, i, len(m.Body), len(want))
			}
			if bodyBytes != len(bodies[i]) {
				t.Errorf("maxBody %d message %d: got bodyBytes %d, want %d", maxBody, i, bodyBytes, len(bodies[i]))
			}
			if m.Headers.Get("k") != "v" || m.ID != ops[i].Msg.ID {
				t.Errorf("maxBody %d message %d: got id %d headers %v, want id %d and k=v", maxBody, i, m.ID, m.Headers, ops[i].Msg.ID)
			}
			i++
			return nil
		})
		if err != nil || i != 3 {
			t.Fatalf("maxBody %d: got %d messages, err %v; want 3", maxBody, i, err)
		}
	}
}
