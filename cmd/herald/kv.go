package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// herald kv: the key-value store (/kv/BUCKET.KEY) over STOMP, with the
// server's own frames (README "Key-value store"): a put is a SEND whose
// RECEIPT carries revision (or kv-conflict), get and ls read a kv-get
// snapshot up to its kv-snapshot-complete marker, history a kv-history
// SUBSCRIBE up to kv-history-complete, watch a plain SUBSCRIBE.

const kvKeyHelp = `KEY is BUCKET.KEY (config.site1.db), with or without the /kv/ prefix.`

func kvCommand() *cli.Command {
	timeout := func() cli.Flag {
		return &cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up waiting for the server after this long (exit 75; 0: no limit)"}
	}
	jsonFlag := func(what string) cli.Flag {
		return &cli.BoolFlag{Name: "json", Usage: "print " + what}
	}
	ifRevision := &cli.StringFlag{Name: "if-revision", Usage: "compare-and-set: only if the key is at revision `N` (0: only if it does not exist)"}
	cmds := []*cli.Command{
		{
			Name:      "get",
			Usage:     "print the value of a key",
			ArgsUsage: "KEY",
			Description: kvKeyHelp + `
Prints the value followed by a newline unless it ends with one; --raw prints
the exact bytes (herald kv get --raw K > F, then herald kv put K --file F,
round-trips). --json prints {"key","revision","content_type","value"}, plus
"value_base64" holding the exact bytes when the value is not valid UTF-8. A key
that does not exist exits with status 66.`,
			Flags:  []cli.Flag{jsonFlag("the key, its revision, content-type and value as JSON"), &cli.BoolFlag{Name: "raw", Usage: "print the value's bytes only, without an added newline"}, timeout()},
			Action: runKVGet,
		},
		{
			Name:      "put",
			Usage:     "set the value of a key",
			ArgsUsage: "KEY [VALUE]",
			Description: kvKeyHelp + `
The value is VALUE, else the whole of --file F (- for stdin), else the whole of
stdin. Prints the key's new revision (the bucket's revision of this change)
once the server has it in its journal.
With --if-revision N the put is a compare-and-set: stored only if the key is
at revision N (0: only if the key does not exist). A conflict stores nothing,
prints the key's current revision in the error and exits with status 1: read
the key again (herald kv get --json) and retry.`,
			Flags: []cli.Flag{
				ifRevision,
				&cli.StringFlag{Name: "content-type", Usage: "content-type kept with the value (for example application/json)"},
				&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "read the value from `FILE` (- for stdin)"},
				jsonFlag(`{"key","revision"} (JSON)`),
				timeout(),
			},
			Action: runKVPut,
		},
		{
			Name:      "del",
			Usage:     "delete a key",
			ArgsUsage: "KEY",
			Description: kvKeyHelp + `
Prints the revision of the delete (a delete is a change of the bucket, seen by
watchers). Deleting a key that does not exist changes nothing: exit 0, a note
on stderr, no revision. --if-revision N deletes only if the key is at revision
N (a conflict exits with status 1, as for put).`,
			Flags:  []cli.Flag{ifRevision, jsonFlag(`{"key","revision","deleted"} (JSON; "deleted":false when there was no such key)`), timeout()},
			Action: runKVDel,
		},
		{
			Name:      "history",
			Usage:     "print the kept revisions of a key, oldest first",
			ArgsUsage: "KEY",
			Description: kvKeyHelp + `
The server keeps the last kv.history revisions of each key (1 by default: the
current one). Columns: REVISION, OPERATION, CONTENT-TYPE, BYTES, VALUE (values
with a newline, a tab, a leading quote or bytes that are not UTF-8 are shown
quoted, as Go strings). --json prints a JSON array of {"key","revision","operation",
"content_type","bytes","value"} (plus "value_base64" for values that are not UTF-8).`,
			Flags:  []cli.Flag{jsonFlag("a JSON array of the revisions"), timeout()},
			Action: runKVHistory,
		},
		{
			Name:      "watch",
			Usage:     "print the current values of matching keys, then every change",
			ArgsUsage: "PATTERN",
			Description: `PATTERN is BUCKET.KEY or a pattern (* one dot segment, > the rest:
config.site1.>). Prints the current value of every matching key, then the line
#SNAPSHOT-COMPLETE REV (the bucket's revision the snapshot reflects), then
every change after it as it happens: none missed, none twice. Each line is

  REVISION<TAB>OPERATION<TAB>KEY<TAB>VALUE

(OPERATION PUT or DEL; a DEL has no value; values with a newline, a tab, a
leading quote or bytes that are not UTF-8 are shown quoted, as Go strings). With --json, one
JSON object per line: {"key","revision","operation","content_type","value",
"snapshot"} (plus "value_base64" for values that are not UTF-8), and
{"snapshot_complete":REV} for the marker. Ends on Ctrl-C, after --count
changes, or with status 75 when --timeout passes without a change.

With --group ADDR:PORT, the bucket is carried on a multicast channel (the
channel's kv list in heraldd's configuration): the snapshot is read over
STOMP, then the changes come by multicast and no connection is held. When
the watch cannot show it has every revision (one skipped, a multicast gap, a
sender restart, or heraldd's marker for changes it could not send), it
prints

  #RESYNC<TAB>REV<TAB>REASON      ({"resync":{"reason","after"}} with --json)

and reads the bucket again over STOMP: a new snapshot and #SNAPSHOT-COMPLETE
follow, and whoever keeps a copy replaces it with that snapshot. --interface,
--key-file, --key-id and --seal are herald listen's.`,
			Flags: []cli.Flag{
				jsonFlag("one JSON object per line"),
				&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "exit after `N` changes after the snapshot (0: never)"},
				&cli.DurationFlag{Name: "timeout", Usage: "exit with status 75 when no change arrives for this long (0: wait forever)"},
				&cli.StringFlag{Name: "group", Usage: "receive the changes from the multicast channel at `ADDR:PORT` carrying the bucket"},
				&cli.StringFlag{Name: "interface", Aliases: []string{"i"}, Usage: "with --group, `IFACE` to join on"},
				&cli.StringFlag{Name: "key-file", Usage: "with --group, the channel's HMAC key `FILE`"},
				&cli.IntFlag{Name: "key-id", Usage: "with --group, the key id the sender uses with that key"},
				&cli.BoolFlag{Name: "seal", Usage: "with --group, the channel is sealed"},
			},
			Action: runKVWatch,
		},
		{
			Name:      "ls",
			Usage:     "list the keys of a bucket, under a prefix or matching a pattern",
			ArgsUsage: "BUCKET[.PREFIX|.PATTERN]",
			Description: `Prints one key per line, in key order. BUCKET lists the whole bucket,
BUCKET.PREFIX the keys under PREFIX (config.site1: config.site1.db, ...), a
pattern (with * or >) the keys it matches. --json prints a JSON array of
{"key","revision","content_type","bytes"}.`,
			Flags:  []cli.Flag{jsonFlag("a JSON array of the keys with their revision, content-type and size"), timeout()},
			Action: runKVLs,
		},
	}
	c := &cli.Command{
		Name:  "kv",
		Usage: "get, put, delete, list and watch keys of the key-value store (/kv/BUCKET.KEY)",
		Description: `The key-value store of heraldd over STOMP (--server, HERALD_SERVER): buckets
of keys with revisions, compare-and-set and watches (README "Key-value store").
A key is BUCKET.KEY; the /kv/ prefix may be given or left out.`,
		Subcommands: cmds,
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown kv command %q: want get, put, del, history, watch or ls; see: herald kv --help", cCtx.Args().First())
			}
			return usageErrorf("kv needs a command: get, put, del, history, watch or ls; see: herald kv --help")
		},
	}
	setUsageErrors(c)
	return c
}

// kvName turns KEY (BUCKET.KEY or /kv/BUCKET.KEY) into its name without
// the prefix; wild tells whether a pattern is allowed.
func kvName(arg, usage string, wild bool) (string, error) {
	name := strings.TrimPrefix(arg, "/kv/")
	bucket, key, ok := strings.Cut(name, ".")
	if name == "" || bucket == "" || !ok || key == "" {
		return "", usageErrorf("%q is not a key: want BUCKET.KEY (for example config.site1.db): herald %s", arg, usage)
	}
	if !wild && hasWild(name) {
		return "", usageErrorf("%q is a pattern; %s reads one key (list keys with: herald kv ls %s)", arg, strings.Fields(usage)[1], name)
	}
	return name, nil
}

func hasWild(name string) bool {
	for _, seg := range strings.Split(name, ".") {
		if seg == "*" || seg == ">" {
			return true
		}
	}
	return false
}

func parseIfRevision(cCtx *cli.Context) ([]stomp.Header, error) {
	if !cCtx.IsSet("if-revision") {
		return nil, nil
	}
	v := cCtx.String("if-revision")
	if _, err := strconv.ParseUint(v, 10, 63); err != nil {
		return nil, usageErrorf("--if-revision %q: want a revision number (0: the key must not exist)", v)
	}
	return []stomp.Header{{Key: "if-revision", Value: v}}, nil
}

func kvTimeout(cCtx *cli.Context) (time.Duration, error) {
	d := cCtx.Duration("timeout")
	if d < 0 {
		return 0, usageErrorf("--timeout %v: must not be negative (0: no limit)", d)
	}
	return d, nil
}

// kvWrite sends a put or a delete and returns its RECEIPT.
func kvWrite(cCtx *cli.Context, name string, body []byte, hdrs []stomp.Header, timeout time.Duration, doing string) (*stomp.Frame, error) {
	c, err := dial(cCtx.Context, cCtx, [2]time.Duration{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	server := cCtx.String("server")
	ctx, cancel := withTimeout(cCtx.Context, timeout)
	defer cancel()
	r, err := c.SendReceipt(ctx, "/kv/"+name, body, hdrs...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &exitError{code: exitTimeout, err: fmt.Errorf(
				"%s: no answer from the server within %v; the write may or may not have been stored (check with: herald kv get %s), or raise --timeout", doing, timeout, name)}
		}
		return nil, failure(server, doing, serverCause(c, err))
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	c.Disconnect(dctx) // the answer is in hand; a failed goodbye changes nothing
	return r, nil
}

// conflictErr reports a compare-and-set conflict (exit 1).
func conflictErr(name, want, current string) error {
	what := "is at revision " + current
	if current == "0" {
		what = "does not exist"
	}
	return &exitError{code: exitOther, err: fmt.Errorf(
		"revision conflict: %s %s, not %s (--if-revision); nothing was stored. Read it again (herald kv get --json %s) and retry", name, what, want, name)}
}

type kvWriteJSON struct {
	Key      string  `json:"key"`
	Revision *uint64 `json:"revision,omitempty"`
	Deleted  *bool   `json:"deleted,omitempty"`
}

func runKVPut(cCtx *cli.Context) error {
	const usage = "kv put [flags] KEY [VALUE]"
	if err := checkArgs(cCtx, 1, 2, usage); err != nil {
		return err
	}
	name, err := kvName(cCtx.Args().Get(0), usage, false)
	if err != nil {
		return err
	}
	hdrs, err := parseIfRevision(cCtx)
	if err != nil {
		return err
	}
	timeout, err := kvTimeout(cCtx)
	if err != nil {
		return err
	}
	file := cCtx.String("file")
	if cCtx.IsSet("file") && file == "" {
		return usageErrorf("--file needs a file name (- for stdin)")
	}
	if file != "" && cCtx.Args().Len() == 2 {
		return usageErrorf("give VALUE or --file, not both: herald %s", usage)
	}
	var value []byte
	switch {
	case cCtx.Args().Len() == 2:
		value = []byte(cCtx.Args().Get(1))
	case file != "":
		if value, err = readWhole(cCtx.App.Reader, file); err != nil {
			return err
		}
	default:
		if value, err = io.ReadAll(cCtx.App.Reader); err != nil {
			return &exitError{code: exitOther, err: fmt.Errorf("read the value from stdin: %w", err)}
		}
	}
	if ct := cCtx.String("content-type"); ct != "" {
		hdrs = append(hdrs, stomp.Header{Key: "content-type", Value: ct})
	}
	r, err := kvWrite(cCtx, name, value, hdrs, timeout, "put "+name)
	if err != nil {
		return err
	}
	if cur := r.Get("kv-conflict"); cur != "" {
		return conflictErr(name, cCtx.String("if-revision"), cur)
	}
	return printRevision(cCtx, name, r, nil)
}

func printRevision(cCtx *cli.Context, name string, r *stomp.Frame, deleted *bool) error {
	rev, err := strconv.ParseUint(r.Get("revision"), 10, 64)
	if err != nil {
		return &exitError{code: exitOther, err: fmt.Errorf("the server's receipt for %s has no revision (%q): is heraldd older than the key-value store?", name, r.Get("revision"))}
	}
	if cCtx.Bool("json") {
		return stdoutOK(printJSONLine(cCtx.App.Writer, kvWriteJSON{Key: name, Revision: &rev, Deleted: deleted}))
	}
	_, err = fmt.Fprintln(cCtx.App.Writer, rev)
	return stdoutOK(err)
}

func runKVDel(cCtx *cli.Context) error {
	const usage = "kv del [flags] KEY"
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return err
	}
	name, err := kvName(cCtx.Args().Get(0), usage, false)
	if err != nil {
		return err
	}
	hdrs, err := parseIfRevision(cCtx)
	if err != nil {
		return err
	}
	timeout, err := kvTimeout(cCtx)
	if err != nil {
		return err
	}
	hdrs = append(hdrs, stomp.Header{Key: "kv-operation", Value: "DEL"})
	r, err := kvWrite(cCtx, name, nil, hdrs, timeout, "delete "+name)
	if err != nil {
		return err
	}
	if cur := r.Get("kv-conflict"); cur != "" {
		return conflictErr(name, cCtx.String("if-revision"), cur)
	}
	if r.Get("kv-noop") == "true" {
		fmt.Fprintf(cCtx.App.ErrWriter, "herald: %s does not exist; nothing was deleted\n", name)
		if cCtx.Bool("json") {
			no := false
			return stdoutOK(printJSONLine(cCtx.App.Writer, kvWriteJSON{Key: name, Deleted: &no}))
		}
		return nil
	}
	yes := true
	return printRevision(cCtx, name, r, &yes)
}

// kvEntry is one key's value as the commands print it with --json.
type kvEntry struct {
	Key         string `json:"key"`
	Revision    uint64 `json:"revision"`
	Operation   string `json:"operation,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Bytes       *int   `json:"bytes,omitempty"`
	Value       string `json:"value"`
	ValueBase64 string `json:"value_base64,omitempty"`
	Snapshot    bool   `json:"snapshot,omitempty"`

	raw []byte
}

func entryOf(m *stomp.Frame) kvEntry {
	rev, _ := strconv.ParseUint(m.Get("revision"), 10, 64)
	e := kvEntry{
		Key:         strings.TrimPrefix(m.Get("destination"), "/kv/"),
		Revision:    rev,
		Operation:   m.Get("kv-operation"),
		ContentType: m.Get("content-type"),
		Value:       string(m.Body),
		Snapshot:    m.Get("kv-snapshot") == "true",
		raw:         m.Body,
	}
	if !utf8.Valid(m.Body) {
		e.ValueBase64 = base64.StdEncoding.EncodeToString(m.Body)
	}
	return e
}

// shown is a value for a line of text: quoted when it would break the line.
func shown(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\n\r\t") || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}

// kvReader reads one SUBSCRIBE's MESSAGEs until the one carrying endHeader,
// with the connection's ERROR, loss and the timeout turned into errors.
type kvReader struct {
	cCtx    *cli.Context
	c       *client.Conn
	server  string
	timeout time.Duration
}

func openKV(cCtx *cli.Context, timeout time.Duration, hb time.Duration) (*kvReader, error) {
	c, err := dial(cCtx.Context, cCtx, [2]time.Duration{hb, hb})
	if err != nil {
		return nil, err
	}
	return &kvReader{cCtx: cCtx, c: c, server: cCtx.String("server"), timeout: timeout}, nil
}

// collect subscribes to dest with hdrs and returns the MESSAGEs before the
// one with endHeader, and that header's value.
func (r *kvReader) collect(dest, doing, endHeader string, hdrs ...stomp.Header) ([]*stomp.Frame, string, error) {
	sub, err := r.c.Subscribe(dest, "auto", hdrs...)
	if err != nil {
		return nil, "", failure(r.server, doing, serverCause(r.c, err))
	}
	var expired <-chan time.Time
	if r.timeout > 0 {
		t := time.NewTimer(r.timeout)
		defer t.Stop()
		expired = t.C
	}
	var out []*stomp.Frame
	for {
		select {
		case m, ok := <-sub.C():
			if !ok {
				<-r.c.Done()
				return nil, "", failure(r.server, doing, serverCause(r.c, r.c.Err()))
			}
			if v, ok := m.Headers.Lookup(endHeader); ok {
				return out, v, nil
			}
			out = append(out, m)
		case f := <-r.c.Errors():
			return nil, "", failure(r.server, doing, &client.ServerError{Frame: f})
		case <-r.c.Done():
			return nil, "", failure(r.server, doing, serverCause(r.c, r.c.Err()))
		case <-expired:
			return nil, "", &exitError{code: exitTimeout, err: fmt.Errorf("%s: no answer from the server within %v; it may be overloaded (see heraldd's log), or raise --timeout", doing, r.timeout)}
		}
	}
}

func (r *kvReader) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.c.Disconnect(ctx)
	r.c.Close()
}

func runKVGet(cCtx *cli.Context) error {
	const usage = "kv get [flags] KEY"
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return err
	}
	name, err := kvName(cCtx.Args().Get(0), usage, false)
	if err != nil {
		return err
	}
	timeout, err := kvTimeout(cCtx)
	if err != nil {
		return err
	}
	r, err := openKV(cCtx, timeout, 0)
	if err != nil {
		return err
	}
	defer r.close()
	msgs, _, err := r.collect("/kv/"+name, "get "+name, "kv-snapshot-complete", stomp.Header{Key: "kv-get", Value: "true"})
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		bucket, _, _ := strings.Cut(name, ".")
		return &exitError{code: exitNotFound, err: fmt.Errorf("no key %s; list the bucket's keys with: herald kv ls %s", name, bucket)}
	}
	e := entryOf(msgs[0])
	w := cCtx.App.Writer
	switch {
	case cCtx.Bool("json"):
		return stdoutOK(printJSONLine(w, e))
	case cCtx.Bool("raw"):
		_, err = w.Write(e.raw)
	default:
		_, err = w.Write(e.raw)
		if err == nil && (len(e.raw) == 0 || e.raw[len(e.raw)-1] != '\n') {
			_, err = io.WriteString(w, "\n")
		}
	}
	return stdoutOK(err)
}

func runKVLs(cCtx *cli.Context) error {
	const usage = "kv ls [flags] BUCKET[.PREFIX|.PATTERN]"
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return err
	}
	arg := strings.TrimPrefix(cCtx.Args().Get(0), "/kv/")
	if arg == "" || strings.HasPrefix(arg, ".") || hasWild(strings.SplitN(arg, ".", 2)[0]) {
		return usageErrorf("%q: want a bucket, a bucket and a prefix, or a pattern (config, config.site1, config.*.db): herald %s", cCtx.Args().Get(0), usage)
	}
	pattern := arg
	if !hasWild(arg) {
		pattern = strings.TrimSuffix(arg, ".") + ".>"
	}
	timeout, err := kvTimeout(cCtx)
	if err != nil {
		return err
	}
	r, err := openKV(cCtx, timeout, 0)
	if err != nil {
		return err
	}
	defer r.close()
	msgs, _, err := r.collect("/kv/"+pattern, "list "+pattern, "kv-snapshot-complete", stomp.Header{Key: "kv-get", Value: "true"})
	if err != nil {
		return err
	}
	w := cCtx.App.Writer
	if cCtx.Bool("json") {
		list := make([]kvEntry, 0, len(msgs))
		for _, m := range msgs {
			e := entryOf(m)
			n := len(m.Body)
			list = append(list, kvEntry{Key: e.Key, Revision: e.Revision, ContentType: e.ContentType, Bytes: &n})
		}
		return stdoutOK(printJSONList(w, list, func(e kvEntry) any {
			return struct {
				Key         string `json:"key"`
				Revision    uint64 `json:"revision"`
				ContentType string `json:"content_type"`
				Bytes       int    `json:"bytes"`
			}{e.Key, e.Revision, e.ContentType, *e.Bytes}
		}))
	}
	bw := bufio.NewWriter(w)
	for _, m := range msgs {
		bw.WriteString(strings.TrimPrefix(m.Get("destination"), "/kv/"))
		bw.WriteByte('\n')
	}
	return stdoutOK(bw.Flush())
}

func runKVHistory(cCtx *cli.Context) error {
	const usage = "kv history [flags] KEY"
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return err
	}
	name, err := kvName(cCtx.Args().Get(0), usage, false)
	if err != nil {
		return err
	}
	timeout, err := kvTimeout(cCtx)
	if err != nil {
		return err
	}
	r, err := openKV(cCtx, timeout, 0)
	if err != nil {
		return err
	}
	defer r.close()
	msgs, _, err := r.collect("/kv/"+name, "history of "+name, "kv-history-complete", stomp.Header{Key: "kv-history", Value: "true"})
	if err != nil {
		return err
	}
	w := cCtx.App.Writer
	if cCtx.Bool("json") {
		// The table's columns, each in every revision (as kv ls --json).
		type revision struct {
			Key         string `json:"key"`
			Revision    uint64 `json:"revision"`
			Operation   string `json:"operation"`
			ContentType string `json:"content_type"`
			Bytes       int    `json:"bytes"`
			Value       string `json:"value"`
			ValueBase64 string `json:"value_base64,omitempty"`
		}
		list := make([]kvEntry, 0, len(msgs))
		for _, m := range msgs {
			list = append(list, entryOf(m))
		}
		return stdoutOK(printJSONList(w, list, func(e kvEntry) any {
			return revision{e.Key, e.Revision, e.Operation, e.ContentType, len(e.raw), e.Value, e.ValueBase64}
		}))
	}
	t := newTable(w, "REVISION", "OPERATION", "CONTENT-TYPE", "BYTES", "VALUE")
	for _, m := range msgs {
		e := entryOf(m)
		ct := e.ContentType
		if ct == "" {
			ct = "-"
		}
		t.row(e.Revision, e.Operation, ct, len(e.raw), shown(e.raw))
	}
	if len(msgs) == 0 {
		t.row("(no revisions: the key does not exist)")
	}
	return stdoutOK(t.flush())
}

// kvWatchHeartBeat is offered both ways, so that a dead server is noticed
// while waiting for changes.
const kvWatchHeartBeat = 10 * time.Second

func runKVWatch(cCtx *cli.Context) error {
	const usage = "kv watch [flags] PATTERN"
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return err
	}
	name, err := kvName(cCtx.Args().Get(0), usage, true)
	if err != nil {
		return err
	}
	count, idle := cCtx.Int("count"), cCtx.Duration("timeout")
	if count < 0 || idle < 0 {
		return usageErrorf("--count and --timeout must not be negative")
	}
	if cCtx.String("group") != "" {
		return runKVWatchMulticast(cCtx, name, count, idle) // kv_mcast.go
	}
	ctx, stop := signal.NotifyContext(cCtx.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := openKV(cCtx, 0, kvWatchHeartBeat)
	if err != nil {
		return err
	}
	defer r.close()
	doing := "watch " + name
	sub, err := r.c.Subscribe("/kv/"+name, "auto")
	if err != nil {
		return failure(r.server, doing, serverCause(r.c, err))
	}
	out := bufio.NewWriterSize(cCtx.App.Writer, 64<<10)
	asJSON := cCtx.Bool("json")
	var enc *json.Encoder
	if asJSON {
		enc = json.NewEncoder(out)
		enc.SetEscapeHTML(false)
	}
	var timer *time.Timer
	var expired <-chan time.Time
	if idle > 0 {
		timer = time.NewTimer(idle)
		defer timer.Stop()
		expired = timer.C
	}
	live, changes := false, 0
	for count == 0 || changes < count {
		select {
		case m, ok := <-sub.C():
			if !ok {
				<-r.c.Done()
				return failure(r.server, doing, serverCause(r.c, r.c.Err()))
			}
			if rev, ok := m.Headers.Lookup("kv-snapshot-complete"); ok {
				live = true
				n, _ := strconv.ParseUint(rev, 10, 64)
				err = printKVMarker(out, enc, n)
			} else {
				if live {
					changes++
				}
				err = printKVEntry(out, enc, entryOf(m))
			}
			if err == nil && len(sub.C()) == 0 {
				err = out.Flush()
			}
			if err != nil {
				return stdoutOK(err)
			}
			if timer != nil && live {
				timer.Reset(idle)
			}
		case f := <-r.c.Errors():
			out.Flush()
			return failure(r.server, doing, &client.ServerError{Frame: f})
		case <-r.c.Done():
			out.Flush()
			return failure(r.server, doing, serverCause(r.c, r.c.Err()))
		case <-expired:
			out.Flush()
			return &exitError{code: exitTimeout, err: fmt.Errorf("no change to %s within %v", name, idle)}
		case <-ctx.Done():
			return stdoutOK(out.Flush()) // interrupted by the user: a normal end
		}
	}
	return stdoutOK(out.Flush())
}

// printKVEntry prints a watched change or snapshot entry as kv watch does:
// one JSON object with enc, else REVISION<TAB>OPERATION<TAB>KEY[<TAB>VALUE].
func printKVEntry(out io.Writer, enc *json.Encoder, e kvEntry) error {
	var err error
	switch {
	case enc != nil:
		err = enc.Encode(e)
	case e.Operation == "DEL":
		_, err = fmt.Fprintf(out, "%d\t%s\t%s\n", e.Revision, e.Operation, e.Key)
	default:
		_, err = fmt.Fprintf(out, "%d\t%s\t%s\t%s\n", e.Revision, e.Operation, e.Key, shown(e.raw))
	}
	return err
}

// printKVMarker prints the end of a snapshot at revision n.
func printKVMarker(out io.Writer, enc *json.Encoder, n uint64) error {
	if enc != nil {
		return enc.Encode(map[string]uint64{"snapshot_complete": n})
	}
	_, err := fmt.Fprintf(out, "#SNAPSHOT-COMPLETE %d\n", n)
	return err
}

func printJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printJSONList prints list as one indented JSON array (the admin
// commands' form), each element as f makes it.
func printJSONList[T any](w io.Writer, list []T, f func(T) any) error {
	arr := make([]any, 0, len(list))
	for _, e := range list {
		arr = append(arr, f(e))
	}
	return printJSON(w, arr)
}

// stdoutOK turns a failed write to stdout into its exit error.
func stdoutOK(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return stdoutErr(err)
}
