package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// Global flags (--server, --login, ...) written after the command or its
// arguments reach the application, as flags of the command do.
func TestCLI_GlobalFlagsAfterCommand(t *testing.T) {
	addr := startBroker(t)
	if code, _, stderr := runCLI(t, "", "send", "/queue/g", "x", "--server", addr, "--receipt"); code != 0 {
		t.Fatalf("send DEST BODY --server: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "", "send", "--server="+addr, "/queue/g", "y"); code != 0 {
		t.Fatalf("send --server=ADDR DEST BODY: exit %d: %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "", "receive", "--count", "2", "/queue/g", "--connect-timeout", "3s", "--server", addr)
	if code != 0 || out != "x\ny\n" {
		t.Fatalf("receive ... --server ADDR: exit %d, %q, %s", code, out, stderr)
	}
}

// send --file F sends the whole file, newlines and all, as one message;
// --file - does the same with stdin.
func TestSend_File(t *testing.T) {
	addr := startBroker(t)
	body := "line one\nline two\r\n\x00binary\xff\n"
	f := filepath.Join(t.TempDir(), "msg")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "", "--server", addr, "send", "--receipt", "--file", f, "/queue/files"); code != 0 {
		t.Fatalf("send --file: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "from\nstdin\n", "--server", addr, "send", "/queue/files", "--file", "-"); code != 0 {
		t.Fatalf("send --file -: exit %d: %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "", "--server", addr, "receive", "--json", "--count", "2", "/queue/files")
	if code != 0 {
		t.Fatalf("receive: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 messages, got %d: %q", len(lines), out)
	}
	var m1, m2 jsonMessage
	json.Unmarshal([]byte(lines[0]), &m1)
	json.Unmarshal([]byte(lines[1]), &m2)
	if exact, _ := base64.StdEncoding.DecodeString(m1.BodyBase64); string(exact) != body || m1.Headers["content-length"] != fmt.Sprint(len(body)) {
		t.Errorf("file message: %+v, want the whole %d-byte file byte for byte", m1, len(body))
	}
	if m2.Body != "from\nstdin\n" {
		t.Errorf("stdin message: %q, want the whole of stdin", m2.Body)
	}
	// --file with a BODY argument is ambiguous; a missing file is named.
	code, _, stderr = runCLI(t, "", "--server", addr, "send", "--file", f, "/queue/files", "body")
	if code != exitUsage || !strings.Contains(stderr, "--file") {
		t.Errorf("--file with BODY: exit %d %q, want %d naming --file", code, stderr, exitUsage)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "send", "--file", f+".missing", "/queue/files")
	if code != exitNoInput || !strings.Contains(stderr, f+".missing") {
		t.Errorf("--file missing: exit %d %q, want %d naming the file", code, stderr, exitNoInput)
	}
}

// receive on a wildcard prints DEST<TAB>BODY; on one destination the body
// alone (unchanged).
func TestReceive_WildcardPrintsDestination(t *testing.T) {
	addr := startBroker(t)
	type res struct {
		code        int
		out, stderr string
	}
	done := make(chan res, 1)
	go func() {
		code, out, stderr := runCLI(t, "", "--server", addr, "receive", "--count", "4", "/topic/prices.*")
		done <- res{code, out, stderr}
	}()
	// A topic keeps nothing for late subscribers: publish until the
	// receiver has had its four. (With a client of our own: two CLIs in
	// one process would share urfave/cli's global help flag.)
	pub, err := client.Dial(context.Background(), addr, client.Options{DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var r res
	for i := 0; ; i++ {
		cur := []string{"eur", "usd"}[i%2]
		if err := pub.Send("/topic/prices."+cur, []byte(cur+" price")); err != nil {
			t.Fatalf("send: %v", err)
		}
		select {
		case r = <-done:
		case <-time.After(50 * time.Millisecond):
			if i < 400 {
				continue
			}
			t.Fatal("receive did not get 4 messages")
		}
		break
	}
	if r.code != 0 {
		t.Fatalf("receive: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines, got %q", r.out)
	}
	for _, l := range lines {
		dest, body, ok := strings.Cut(l, "\t")
		cur := strings.TrimPrefix(dest, "/topic/prices.")
		if !ok || (cur != "eur" && cur != "usd") || body != cur+" price" {
			t.Errorf("line %q: want /topic/prices.CUR<TAB>CUR price", l)
		}
	}
}

// --timeout 0 means no timeout for send as for receive and the admin
// commands.
func TestSend_TimeoutZeroWaits(t *testing.T) {
	addr := startBroker(t)
	code, _, stderr := runCLI(t, "", "--server", addr, "send", "--receipt", "--timeout", "0s", "/queue/t0", "y")
	if code != 0 {
		t.Fatalf("send --timeout 0s: exit %d: %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "", "--server", addr, "receive", "--count", "1", "--timeout", "0", "/queue/t0")
	if code != 0 || out != "y\n" {
		t.Fatalf("receive --timeout 0: exit %d %q %s", code, out, stderr)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "send", "--timeout", "-1s", "/queue/t0", "y")
	if code != exitUsage {
		t.Errorf("send --timeout -1s: exit %d %s, want %d", code, stderr, exitUsage)
	}
}

// A bad destination is a usage error (64) with the server's reason and
// nothing internal ("appliance:", "disconnect:", "stomp").
func TestCLI_BadDestination(t *testing.T) {
	addr := startBroker(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "/bogus", "x"}, `invalid destination "/bogus": use /queue/NAME, /topic/NAME, /stream/NAME, /kv/BUCKET.KEY or /lock/NAME`},
		{[]string{"send", "--receipt", "/bogus", "x"}, `invalid destination "/bogus": use /queue/NAME, /topic/NAME, /stream/NAME, /kv/BUCKET.KEY or /lock/NAME`},
		{[]string{"send", "/queue/a.*", "x"}, `invalid destination "/queue/a.*": wildcards are for topics only`},
		{[]string{"receive", "--timeout", "5s", "/bogus"}, `invalid destination "/bogus": use /queue/NAME, /topic/NAME, /stream/NAME, /kv/BUCKET.KEY or /lock/NAME`},
	} {
		code, _, stderr := runCLI(t, "a\nb\n", append([]string{"--server", addr}, tc.args...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, exitUsage, stderr)
		}
		if stderr != "herald: "+tc.want+"\n" {
			t.Errorf("%v: stderr %q, want %q", tc.args, stderr, "herald: "+tc.want+"\n")
		}
	}
}

// The admin commands print each hint once, without internal prefixes.
func TestAdminCLI_NotFoundHintOnce(t *testing.T) {
	d := admintest.Start(t, nil)
	for _, args := range [][]string{{"queue", "peek", "nope"}, {"queue", "show", "nope"}, {"queue", "delete", "--yes", "nope"}} {
		_, stderr := runAdmin(t, d.Socket, exitNotFound, args...)
		if n := strings.Count(stderr, "herald queues"); n != 1 {
			t.Errorf("%v: the hint %d times: %s", args, n, stderr)
		}
		if strings.Contains(stderr, "appliance:") {
			t.Errorf("%v: internal prefix: %s", args, stderr)
		}
	}
}

// backup has no timeout unless given one; its help says so.
func TestBackupHelp_Default(t *testing.T) {
	code, out, stderr := runCLI(t, "", "backup", "--help")
	if code != 0 {
		t.Fatalf("backup --help: exit %d: %s", code, stderr)
	}
	line := lineWith(out, "--timeout value")
	if strings.Contains(line, "30s") || !strings.Contains(line, "default: none") {
		t.Errorf("backup --help: --timeout line %q, want \"default: none\"", line)
	}
	if line := lineWith(first(runAdmin(t, "x", 0, "status", "--help")), "--timeout value"); !strings.Contains(line, "30s") {
		t.Errorf("status --help: --timeout line %q, want the 30s default", line)
	}
}
