package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// SIGHUP reads the users file again, even under the same name: a user
// added can log in, and a connection whose read permission was revoked
// loses its subscription with an ERROR naming the destination; a users
// file that no longer loads is refused with everything left as it was.
func TestReload_SIGHUPReloadsUsers(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.toml")
	h, err := auth.HashPassword("pw", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	write := func(body string) {
		if err := os.WriteFile(users, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	alice := fmt.Sprintf("[users.alice]\npassword = %q\nread = [\"/topic/metrics.>\"]\nwrite = [\"/topic/metrics.>\"]\n", h)
	write(alice)
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "herald.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[auth]\nusers_file = %q\n[admin]\nsocket = %q\n[log]\nlevel = \"info\"\n",
		filepath.Join(dir, "data"), addr, users, filepath.Join(dir, "admin.sock"))), 0o640)
	c, log := startWithConfig(t, cfg, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := client.Dial(ctx, addr, client.Options{Login: "alice", Passcode: "pw"})
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	defer a.Close()
	sub, err := a.SubscribeReceipt(ctx, "/topic/metrics.cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, addr, client.Options{Login: "bob", Passcode: "pw"}); err == nil {
		t.Fatal("bob logged in before he was added")
	}

	// A users file that does not load: refused, alice keeps reading.
	write("[users.alice]\npassword = \"not a hash\"\n")
	mark := len(log.String())
	c.cmd.Process.Signal(syscall.SIGHUP)
	log.waitLog(t, mark, "configuration not reloaded")
	p, err := client.Dial(ctx, addr, client.Options{Login: "alice", Passcode: "pw"})
	if err != nil {
		t.Fatalf("alice after a refused reload: %v", err)
	}
	defer p.Close()
	if _, err := p.SendReceipt(ctx, "/topic/metrics.cpu", []byte("1")); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-sub.C():
		if string(f.Body) != "1" {
			t.Fatalf("got %q", f.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's subscription got nothing after a refused reload")
	}

	// Bob added, alice's read revoked.
	write(fmt.Sprintf("[users.alice]\npassword = %q\nwrite = [\"/topic/metrics.>\"]\n[users.bob]\npassword = %q\nread = [\"/topic/>\"]\n", h, h))
	mark = len(log.String())
	c.cmd.Process.Signal(syscall.SIGHUP)
	log.waitLog(t, mark, "configuration reloaded")
	b, err := client.Dial(ctx, addr, client.Options{Login: "bob", Passcode: "pw"})
	if err != nil {
		t.Fatalf("bob after the reload: %v", err)
	}
	b.Close()
	select {
	case f := <-a.Errors():
		if !strings.Contains(f.Get("message"), "permission denied: read on /topic/metrics.cpu") {
			t.Fatalf("alice's ERROR: %q", f.Get("message"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice kept a subscription whose read permission was revoked")
	}
}
