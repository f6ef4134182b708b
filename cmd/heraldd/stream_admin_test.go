package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance/stomp"
)

// The stream admin API end to end against the real heraldd: herald
// streams' figures (offsets, times, cursors and their lag), the stream
// metrics, reset-cursor (refused while the cursor's consumer is active,
// then the next consumer resumes where it was reset to), and delete
// (refused with subscribers; afterwards a new append starts at offset 0).
func TestStreamAdminAndMetrics(t *testing.T) {
	dir := t.TempDir()
	addr, metrics := freeAddr(t), freeAddr(t)
	sock := filepath.Join(dir, "admin.sock")
	cfg := filepath.Join(dir, "herald.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[admin]\nsocket = %q\nmetrics_listen = %q\n[[streams.policy]]\nmatch = \"s1\"\nmax_count = 1000\n",
		filepath.Join(dir, "data"), addr, sock, metrics)), 0o640)
	startWithConfig(t, cfg, addr)
	c := dial2(t, addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := time.Now().Add(-time.Second)
	for i := 0; i < 10; i++ {
		if _, err := c.SendReceipt(ctx, "/stream/s1", []byte{'x', byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.SubscribeReceipt(ctx, "/stream/s1", "client", stomp.Header{Key: "x-stream-consumer", Value: "w"}, stomp.Header{Key: "x-stream-offset", Value: "first"})
	if err != nil {
		t.Fatal(err)
	}
	var ack string
	for i := 0; i < 4; i++ {
		select {
		case m := <-sub.C():
			ack = m.Get("ack")
		case <-ctx.Done():
			t.Fatal("no MESSAGE")
		}
	}
	if _, err := c.Request(ctx, stomp.NewFrame("ACK", "id", ack)); err != nil {
		t.Fatal(err)
	}
	ac := admin.NewClient(sock)
	// While the consumer holds the cursor a reset is refused.
	if _, err := ac.ResetCursor(ctx, "s1", "w", "first"); err == nil || !strings.Contains(err.Error(), "active consumer") {
		t.Errorf("reset of an active cursor: %v, want refused naming the active consumer", err)
	}
	if _, err := ac.DeleteStream(ctx, "s1"); err == nil || !strings.Contains(err.Error(), "subscribers") {
		t.Errorf("delete of a stream with a subscriber: %v, want refused", err)
	}
	l, err := ac.Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Streams) != 1 {
		t.Fatalf("streams: %+v, want s1 only", l.Streams)
	}
	s := l.Streams[0]
	if s.Name != "s1" || s.Messages != 10 || s.FirstOffset != 0 || s.LastOffset == nil || *s.LastOffset != 9 || s.NextOffset != 10 || s.Subscribers != 1 || s.Appends != 10 || s.Retention.MaxCount != 1000 {
		t.Errorf("stream s1: %+v", s)
	}
	if s.FirstTime == nil || s.LastTime == nil || s.FirstTime.Before(before) || s.LastTime.Before(*s.FirstTime) || s.LastTime.After(time.Now().Add(time.Second)) {
		t.Errorf("times: first %v last %v", s.FirstTime, s.LastTime)
	}
	if len(s.Cursors) != 1 || s.Cursors[0].Name != "w" || s.Cursors[0].Next != 4 || s.Cursors[0].Lag != 6 || !s.Cursors[0].Active {
		t.Errorf("cursors: %+v, want w at 4 with lag 6, active", s.Cursors)
	}
	scrape := func() string {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	m := scrape()
	for _, want := range []string{
		`herald_stream_appends_total{stream="s1"} 10`,
		`herald_stream_messages{stream="s1"} 10`,
		`herald_stream_subscribers{stream="s1"} 1`,
		`herald_stream_cursor_lag{cursor="w",stream="s1"} 6`,
		`herald_stream_cursor_offset{cursor="w",stream="s1"} 4`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := ac.ResetCursor(ctx, "s1", "w", "first")
	if err != nil {
		t.Fatal(err)
	}
	if r.Previous != 4 || r.Offset != 0 {
		t.Errorf("reset: %+v, want from 4 to 0", r)
	}
	if _, err := ac.ResetCursor(ctx, "s1", "nobody", "first"); err == nil || !strings.Contains(err.Error(), "no such cursor") {
		t.Errorf("reset of an unknown cursor: %v", err)
	}
	cl, err := ac.StreamCursors(ctx, "s1")
	if err != nil || len(cl.Cursors) != 1 || cl.Cursors[0].Lag != 10 || cl.Cursors[0].Active {
		t.Errorf("cursors after reset: %+v %v, want lag 10, inactive", cl, err)
	}
	if m := scrape(); !strings.Contains(m, `herald_stream_cursor_lag{cursor="w",stream="s1"} 10`+"\n") {
		t.Errorf("/metrics: lag not 10 after the reset")
	}
	sub, err = c.SubscribeReceipt(ctx, "/stream/s1", "client", stomp.Header{Key: "x-stream-consumer", Value: "w"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.C():
		if m.Get("x-stream-offset") != "0" {
			t.Errorf("after the reset the consumer resumed at %s, want 0", m.Get("x-stream-offset"))
		}
	case <-ctx.Done():
		t.Fatal("no MESSAGE after the reset")
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := ac.DeleteStream(ctx, "/stream/s1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Deleted != 10 {
		t.Errorf("delete removed %d messages, want 10", d.Deleted)
	}
	var nf *admin.APIError
	if _, err := ac.Stream(ctx, "s1"); !errors.As(err, &nf) || nf.Status != http.StatusNotFound {
		t.Errorf("show after delete: %v, want 404", err)
	}
	rc, err := c.SendReceipt(ctx, "/stream/s1", []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Get("x-stream-offset") != "0" {
		t.Errorf("first append after the delete: offset %s, want 0", rc.Get("x-stream-offset"))
	}
	cl, err = ac.StreamCursors(ctx, "s1")
	if err != nil || len(cl.Cursors) != 0 {
		t.Errorf("cursors of the new stream: %+v %v, want none", cl, err)
	}
}
