package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// The key-value store's counts reach /metrics: puts, conflicts and each
// bucket's keys and revision.
func TestKVMetrics(t *testing.T) {
	dir := t.TempDir()
	addr, metrics := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "herald.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[admin]\nsocket = %q\nmetrics_listen = %q\n",
		filepath.Join(dir, "data"), addr, filepath.Join(dir, "admin.sock"), metrics)), 0o640)
	startWithConfig(t, cfg, addr)
	c := dial2(t, addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, v := range []string{"a", "b"} {
		if _, err := c.SendReceipt(ctx, "/kv/cfg.site1.host", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.SendReceipt(ctx, "/kv/cfg.site1.host", []byte("c"), hdrKV("if-revision", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Get("kv-conflict") == "" {
		t.Fatalf("a put at revision 1 after revision 2 was not a conflict: %v", r.Headers)
	}
	// A transaction, a lock grant and a fenced write refused.
	c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "t"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/cfg.site2.host", "transaction", "t"))
	if _, err := c.Request(ctx, stomp.NewFrame(stomp.CmdCommit, "transaction", "t")); err != nil {
		t.Fatal(err)
	}
	l, err := c.SubscribeReceipt(ctx, "/lock/deploy", "auto")
	if err != nil {
		t.Fatal(err)
	}
	<-l.C()
	c2 := dial2(t, addr)
	defer c2.Close()
	if _, err := c2.SendReceipt(ctx, "/kv/cfg.site1.host", []byte("x"), hdrKV("if-fence", "deploy:7")); err == nil {
		t.Fatal("a write fenced by a token never given was stored")
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		"herald_kv_puts_total 3",
		"herald_kv_conflicts_total 1",
		`herald_kv_keys{bucket="cfg"} 2`,
		`herald_kv_revision{bucket="cfg"} 3`,
		"herald_kv_transactions_total 1",
		"herald_lock_grants_total 1",
		"herald_lock_fenced_total 1",
		"herald_lock_names 1",
		"herald_kv_expired_total 0",
	} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}
}

func hdrKV(k, v string) stomp.Header { return stomp.Header{Key: k, Value: v} }
