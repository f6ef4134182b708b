package admin_test

import (
	"bytes"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
)

// TestAPI_PeekBoundedMemory peeks large messages: the answer holds each
// body's first DefaultMaxBody bytes with body_truncated and body_bytes, and
// building it allocates far less than the bodies (the journal reads only
// the prefixes). full_body returns whole bodies, up to MaxPeekBody.
func TestAPI_PeekBoundedMemory(t *testing.T) {
	d := admintest.Start(t, nil)
	c := admin.NewClient(d.Socket)
	defer c.Close()
	conn := d.Dial(t)
	const n, size = 6, 4 << 20
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = bytes.Repeat([]byte{byte('a' + i)}, size)
		if _, err := conn.SendReceipt(ctxT(t), "/queue/big", bodies[i]); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	p, err := c.Peek(ctxT(t), "big", n)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != n {
		t.Fatalf("peek: got %d messages, want %d", len(p.Messages), n)
	}
	for i, m := range p.Messages {
		if m.Body != string(bodies[i][:admin.DefaultMaxBody]) || !m.BodyTruncated || m.BodyBytes != size {
			t.Errorf("message %d: got body of %d bytes, body_truncated %v, body_bytes %d; want %d bytes, true, %d",
				i, len(m.Body), m.BodyTruncated, m.BodyBytes, admin.DefaultMaxBody, size)
		}
	}
	t.Logf("peek of %d bodies of %d bytes: allocated %d bytes, heap %+d bytes after GC", n, size, m1.TotalAlloc-m0.TotalAlloc, int64(m1.HeapAlloc)-int64(m0.HeapAlloc))
	// Whole bodies loaded would allocate n*size (24 MiB) at least, the
	// daemon's and the client's side together.
	if got, limit := m1.TotalAlloc-m0.TotalAlloc, uint64(n*size/8); got > limit {
		t.Errorf("peek allocated %d bytes, want at most %d (bodies total %d)", got, limit, n*size)
	}
	if grown := int64(m1.HeapAlloc) - int64(m0.HeapAlloc); grown > n*size/8 {
		t.Errorf("heap after the peek grew by %d bytes, want at most %d", grown, n*size/8)
	}

	p, err = c.PeekBody(ctxT(t), "big", 2, admin.PeekOptions{MaxBody: -1, FullBody: true})
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("full_body peek: got %v, %v; want 2 messages", p, err)
	}
	for i, m := range p.Messages {
		if m.Body != string(bodies[i]) || m.BodyTruncated || m.BodyBytes != size {
			t.Errorf("full_body message %d: got body of %d bytes, body_truncated %v, body_bytes %d; want %d bytes, false, %d",
				i, len(m.Body), m.BodyTruncated, m.BodyBytes, size, size)
		}
	}
	p, err = c.PeekBody(ctxT(t), "big", 1, admin.PeekOptions{MaxBody: 10})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Body != "aaaaaaaaaa" || !p.Messages[0].BodyTruncated {
		t.Errorf("max_body=10 peek: got %+v, %v; want body aaaaaaaaaa, truncated", p, err)
	}

	for _, q := range []string{"max_body=" + strconv.Itoa(admin.MaxPeekBody+1), "full_body=true&max_body=10", "full_body=maybe"} {
		_, err := c.Do(ctxT(t), "GET", "/v1/queues/big/messages?"+q, nil)
		var ae *admin.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("peek ?%s: got %v, want a 400", q, err)
		}
	}
	_, err = c.PeekBody(ctxT(t), "nosuch", 5, admin.PeekOptions{MaxBody: -1})
	var ae *admin.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || !strings.Contains(ae.Message, "nosuch") {
		t.Errorf("peek of an unknown queue: got %v, want a 404 naming it", err)
	}
}
