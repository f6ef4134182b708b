package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
)

// bench send --dest /queue/NAME leaves its messages and says how to empty
// the queue: the command it names must work as printed. It said "herald
// queue purge NAME", which purge refuses without --yes (exit 64).
func TestBench_DestLeftHintRuns(t *testing.T) {
	d := admintest.Start(t, nil)
	code, _, stderr := runCLI(t, "", "--server", d.STOMP, "bench", "send", "--socket", d.Socket, "--dest", "/queue/left",
		"--producers", "1", "--window", "4", "--duration", "200ms", "--json")
	if code != 0 {
		t.Fatalf("bench send --dest: exit %d: %s", code, stderr)
	}
	_, hint, ok := strings.Cut(stderr, "empty it with: ")
	if !ok {
		t.Fatalf("bench send --dest: no hint to empty the queue in:\n%s", stderr)
	}
	args := strings.Fields(strings.TrimSpace(hint))
	if len(args) < 2 || args[0] != "herald" {
		t.Fatalf("hint %q is not a herald command", hint)
	}
	code, out, errOut := runCLI(t, "", append(args[1:], "--socket", d.Socket)...)
	if code != 0 {
		t.Fatalf("the hint %q fails: exit %d: %s%s", strings.TrimSpace(hint), code, out, errOut)
	}
	q := decode[appliance.QueueView](t, first(runAdmin(t, d.Socket, exitOK, "queue", "show", "--json", "left")))
	if q.Messages != 0 {
		t.Errorf("after the hint %q: %d messages left", strings.TrimSpace(hint), q.Messages)
	}
}

// herald top refuses --json (exit 64), but its help and the manual page
// offered it ("print the answer as JSON"), as for the other admin commands.
func TestAdminCLI_TopHelpHasNoJSON(t *testing.T) {
	code, out, errOut := runCLI(t, "", "top", "--help")
	if code != 0 {
		t.Fatalf("herald top --help: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "--json") {
		t.Errorf("herald top --help offers --json, which top refuses:\n%s", out)
	}
	// --timeout ("give up after this long (exit 75)") was offered too, and
	// top never read it.
	if strings.Contains(out, "--timeout") {
		t.Errorf("herald top --help offers --timeout, which top ignores:\n%s", out)
	}
	_, man, _ := runCLI(t, "", "man")
	_, sec, _ := strings.Cut(man, `.SS "herald top [flags]"`)
	sec, _, _ = strings.Cut(sec, ".SS ")
	if strings.Contains(sec, "json") {
		t.Errorf("herald(1) offers --json for top:\n%s", sec)
	}
}

// herald kv history shows CONTENT-TYPE and BYTES; its --json, documented
// as {"key","revision","operation","content_type","value"}, had no bytes,
// and no content_type when the value had none. Every revision carries both,
// as herald kv ls --json does.
func TestKVCLI_HistoryJSONHasTheTableFields(t *testing.T) {
	addr := startKVBroker(t)
	mustKV(t, addr, 0, "", "put", "cfg.db", "plain")
	mustKV(t, addr, 0, "", "put", "cfg.db", `{"a":1}`, "--content-type", "application/json")
	var hist []map[string]any
	if err := json.Unmarshal([]byte(mustKV(t, addr, 0, "", "history", "--json", "cfg.db")), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 {
		t.Fatalf("history --json: %v, want 2 revisions", hist)
	}
	for i, want := range []struct {
		ct    string
		bytes float64
	}{{"", 5}, {"application/json", 7}} {
		if ct, ok := hist[i]["content_type"]; !ok || ct != want.ct {
			t.Errorf("revision %d: content_type %v (present %v), want %q", i+1, ct, ok, want.ct)
		}
		if b, ok := hist[i]["bytes"].(float64); !ok || b != want.bytes {
			t.Errorf("revision %d: bytes %v, want the number %v (the table's BYTES)", i+1, hist[i]["bytes"], want.bytes)
		}
	}
}

// herald backup --json printed its progress lines on stderr as well ("backup:
// N/M pages"): with --json a script reads the result, and the progress stays
// off (as for requeue and bench).
func TestAdminCLI_BackupJSONIsQuiet(t *testing.T) {
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/orders", 20, "order-")
	dest := filepath.Join(t.TempDir(), "b.db")
	out, stderr := runAdmin(t, d.Socket, exitOK, "backup", "--json", dest)
	if stderr != "" {
		t.Errorf("backup --json: stderr %q, want nothing", stderr)
	}
	var r admin.BackupEvent
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Path != dest || r.PagesTotal == 0 {
		t.Errorf("backup --json: %v: %s", err, out)
	}
}

// A negative --timeout was taken as "no limit" by the admin commands
// (herald status --timeout -1s: exit 0), where send, receive, kv and bench
// refuse it (exit 64). It is a usage error for them too.
func TestAdminCLI_NegativeTimeoutRefused(t *testing.T) {
	d := admintest.Start(t, nil)
	for _, args := range [][]string{
		{"status", "--timeout", "-1s"},
		{"queues", "--timeout", "-5s"},
		{"await-ready", "--timeout", "-1s"},
		{"backup", "--timeout", "-1s", filepath.Join(t.TempDir(), "b.db")},
	} {
		code, _, errOut := runCLI(t, "", append(args, "--socket", d.Socket)...)
		if code != exitUsage || !strings.Contains(errOut, "--timeout") {
			t.Errorf("herald %s: exit %d, stderr %q; want 64 naming --timeout", strings.Join(args, " "), code, errOut)
		}
	}
}

// A required flag left out ("herald user list") got urfave/cli's bare
// `Required flag "file" not set`, where every other usage error says where
// to look: it now ends "see: herald user list --help".
func TestCLI_RequiredFlagHint(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"user list", "see: herald user list --help"},
		{"--server 127.0.0.1:1 user grant alice read /queue/x", "see: herald user grant --help"},
		{"listen --json", "see: herald listen --help"},
	} {
		code, _, errOut := runCLI(t, "", strings.Fields(c.args)...)
		if code != exitUsage || !strings.Contains(errOut, "Required flag") || !strings.Contains(errOut, c.want) {
			t.Errorf("herald %s: exit %d, stderr %q; want 64 and %q", c.args, code, errOut, c.want)
		}
	}
}

// herald listen --key-file naming a file it cannot read exited 1 with
// "read key: open F: ...": a file given on the command line that cannot be
// read is exit 66 (herald(1)), as for send --file and user --file.
func TestListen_UnreadableKeyFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "mcast.key")
	for _, args := range [][]string{
		{"listen", "--group", "239.255.0.9:7400", "--key-file", missing},
		{"listen", "--group", "239.255.0.9:7400", "--key-file", missing, "--next-key-file", missing},
		{"--server", "127.0.0.1:1", "kv", "watch", "--group", "239.255.0.9:7400", "--key-file", missing, "cfg.>"},
	} {
		code, _, errOut := runCLI(t, "", args...)
		if code != exitNoInput || !strings.Contains(errOut, missing) || !strings.Contains(errOut, "key-file") {
			t.Errorf("herald %s: exit %d, stderr %q; want 66 naming --key-file and the file", strings.Join(args, " "), code, errOut)
		}
	}
}

// The packaged unit gives heraldd a private /tmp (PrivateTmp=yes): "sudo
// herald backup /tmp/b.db" succeeded, printed "backup written: /tmp/b.db",
// and left nothing the operator could find (and the copy goes when the
// service stops). The CLI now checks that the file it was told about is
// there, and says where to back up instead. A stand-in admin socket plays
// the daemon in another mount namespace: it reports a file this process
// cannot see.
func TestAdminCLI_BackupNotVisibleHere(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req admin.BackupRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintf(w, `{"type":"progress","pages_done":4,"pages_total":4}`+"\n")
		fmt.Fprintf(w, `{"type":"result","pages_total":4,"path":%q,"bytes":16384,"seconds":0.01}`+"\n", req.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	dest := filepath.Join(t.TempDir(), "elsewhere", "b.db") // not here
	code, out, errOut := runCLI(t, "", "backup", "--socket", sock, dest)
	if code != exitOther || !strings.Contains(errOut, "no such file here") || !strings.Contains(errOut, "/var/lib/herald") {
		t.Errorf("backup of a file heraldd wrote where we cannot see it: exit %d, stdout %q, stderr %q; want 1 saying so and where to back up", code, out, errOut)
	}
	// A file that is there: fine, as before.
	here := filepath.Join(t.TempDir(), "b.db")
	os.WriteFile(here, []byte("x"), 0o600)
	if code, _, errOut := runCLI(t, "", "backup", "--socket", sock, here); code != 0 {
		t.Errorf("backup of a file that is there: exit %d: %s", code, errOut)
	}
}

// A queue that never dead-lettered has no DLQ, and an empty DLQ is forgotten
// once idle: "herald queue requeue jobs" then exited 66, `no such queue
// "DLQ.jobs"`, where an empty DLQ still remembered gave "requeued 0" and
// exit 0. Nothing to requeue is the same answer either way; an unknown
// queue is still 66.
func TestAdminCLI_RequeueWithoutDLQ(t *testing.T) {
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/jobs", 1, "m")
	out, _ := runAdmin(t, d.Socket, exitOK, "queue", "requeue", "jobs")
	if out != "requeued 0 messages from DLQ.jobs to jobs\n" {
		t.Errorf("requeue of a queue without dead letters: %q", out)
	}
	r := decode[admin.QueueOp](t, first(runAdmin(t, d.Socket, exitOK, "queue", "requeue", "--json", "jobs")))
	if r.Requeued == nil || *r.Requeued != 0 || r.DLQ != "DLQ.jobs" || r.Queue != "jobs" {
		t.Errorf("requeue --json without dead letters: %+v", r)
	}
	_, errOut := runAdmin(t, d.Socket, exitNotFound, "queue", "requeue", "nosuch")
	mustContain(t, "requeue of an unknown queue", errOut, "nosuch")
}

// herald(1) gave "herald man COMMAND": man takes no command; the help
// subcommand the library adds to the command being run made it look like
// one with subcommands.
func TestMan_ManIsALeaf(t *testing.T) {
	_, man, _ := runCLI(t, "", "man")
	if strings.Contains(man, `.SS "herald man COMMAND"`) || !strings.Contains(man, `.SS "herald man [flags]"`) {
		i := strings.Index(man, `.SS "herald man`)
		t.Errorf("herald(1) section of man: %q", man[i:min(len(man), i+60)])
	}
}

// --socket (or HERALD_SOCKET) naming a file or directory that is not a
// socket got "heraldd is not answering on PATH; is it running?": it is not
// a socket at all, and the message now says so.
func TestAdminCLI_SocketPathNotASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "herald.toml")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, p := range []string{file, dir} {
		code, _, errOut := runCLI(t, "", "status", "--socket", p)
		if code != exitUnavailable || !strings.Contains(errOut, p+" is not a socket") {
			t.Errorf("status --socket %s: exit %d, stderr %q; want 69 saying it is not a socket", p, code, errOut)
		}
	}
}

// A delete refused for consumers said what to do twice: "close them first
// (herald connections); close its consumers first: herald connections, then
// herald connections close ID". Once, and for a stream, its subscribers.
func TestAdminCLI_BusyHintOnce(t *testing.T) {
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/jobs", 1, "m")
	d.Send(t, conn, "/stream/stats", 1, "s")
	if _, err := conn.SubscribeReceipt(ctxT(t), "/queue/jobs", "client-individual"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.SubscribeReceipt(ctxT(t), "/stream/stats", "auto"); err != nil {
		t.Fatal(err)
	}
	_, errOut := runAdmin(t, d.Socket, exitOther, "queue", "delete", "--yes", "jobs")
	if strings.Count(errOut, "first") != 1 || !strings.Contains(errOut, "herald connections close ID") {
		t.Errorf("queue delete with a consumer: %q; want one hint naming herald connections close ID", errOut)
	}
	code, _, errOut := runCLI(t, "", "stream", "delete", "--socket", d.Socket, "--yes", "stats")
	if code != exitOther || strings.Count(errOut, "first") != 1 || !strings.Contains(errOut, "subscribers first") {
		t.Errorf("stream delete with a subscriber: exit %d, %q; want 1 and one hint about its subscribers", code, errOut)
	}
}

// herald --help lists no help command (HideHelpCommand), but bench, kv,
// user and lock listed "help, h" among their commands. None does now; the
// --help flag is the one way, everywhere.
func TestCLI_NoHelpSubcommandListed(t *testing.T) {
	for _, c := range []string{"bench", "kv", "user", "lock", "queue", "stream", "connections"} {
		code, out, errOut := runCLI(t, "", c, "--help")
		if code != 0 {
			t.Fatalf("herald %s --help: exit %d: %s", c, code, errOut)
		}
		if strings.Contains(out, "help, h") {
			t.Errorf("herald %s --help lists a help command:\n%s", c, out)
		}
	}
}
