package main

// herald kv watch --group: a bucket carried on a multicast channel (the
// channel's kv list). The snapshot is read over STOMP, then the changes
// come by multicast with no connection held; whenever the receiver cannot
// show that it has every revision after the snapshot (a revision skipped,
// a #GAP on the bucket's stream, a sender restart, a lost-revision marker
// from heraldd), it says so and re-reads the bucket over STOMP.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/kvcore"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/multicast"
)

// maxResyncs bounds the snapshots re-read in a row without a change
// applied in between: a channel that loses everything is an error to
// report, not a loop.
const maxResyncs = 10

type kvMulticastWatch struct {
	cCtx    *cli.Context
	name    string // BUCKET.PATTERN
	bucket  string
	pattern string
	out     *bufio.Writer
	enc     *json.Encoder
	applied uint64 // the bucket's revision everything up to which was printed
	resyncs int    // in a row
}

func runKVWatchMulticast(cCtx *cli.Context, name string, count int, idle time.Duration) error {
	bucket, pattern, _ := strings.Cut(name, ".")
	cfg := multicast.ReceiverConfig{
		Group:     cCtx.String("group"),
		Interface: cCtx.String("interface"),
		Topics:    []string{"/kv/" + bucket},
		KeyID:     uint8(cCtx.Int("key-id")),
		Seal:      cCtx.Bool("seal"),
		Logger:    slog.New(slog.NewTextHandler(cCtx.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if id := cCtx.Int("key-id"); id < 0 || id > 255 {
		return usageErrorf("--key-id %d: want 0 to 255", id)
	}
	if f := cCtx.String("key-file"); f != "" {
		key, err := readKeyFile("--key-file", f)
		if err != nil {
			return err
		}
		cfg.Key = key
	} else if cfg.Seal {
		return usageErrorf("--seal needs --key-file (the channel's key)")
	}
	r, err := multicast.NewReceiver(cfg)
	if err != nil {
		return usageErrorf("%v", err)
	}
	ctx, stop := signal.NotifyContext(cCtx.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Joined before the snapshot is read: a change made meanwhile is
	// either in the snapshot or waits in the receiver's events.
	if err := r.Open(ctx); err != nil {
		return fmt.Errorf("listen on %s: %w (try --interface, and check that the group is routed there)", cfg.Group, err)
	}
	defer r.Close()
	w := &kvMulticastWatch{cCtx: cCtx, name: name, bucket: bucket, pattern: pattern,
		out: bufio.NewWriterSize(cCtx.App.Writer, 64<<10)}
	if cCtx.Bool("json") {
		w.enc = json.NewEncoder(w.out)
		w.enc.SetEscapeHTML(false)
	}
	defer w.out.Flush()
	if err := w.snapshot(); err != nil {
		return err
	}
	if err := w.out.Flush(); err != nil {
		return stdoutOK(err)
	}
	var expired <-chan time.Time
	var timer *time.Timer
	if idle > 0 {
		timer = time.NewTimer(idle)
		defer timer.Stop()
		expired = timer.C
	}
	for changes := 0; count == 0 || changes < count; {
		select {
		case ev, ok := <-r.Events():
			if !ok {
				return nil
			}
			n, err := w.event(ev)
			if err != nil {
				return err
			}
			changes += n
			if n > 0 && timer != nil {
				timer.Reset(idle)
			}
			if len(r.Events()) == 0 {
				if err := w.out.Flush(); err != nil {
					return stdoutOK(err)
				}
			}
		case <-expired:
			w.out.Flush()
			return &exitError{code: exitTimeout, err: fmt.Errorf("no change to %s within %v", name, idle)}
		case <-ctx.Done():
			return stdoutOK(w.out.Flush())
		}
	}
	return stdoutOK(w.out.Flush())
}

// event handles one multicast event and returns the changes it printed.
func (w *kvMulticastWatch) event(ev multicast.Event) (int, error) {
	switch e := ev.(type) {
	case multicast.Gap:
		return 0, w.resync(fmt.Sprintf("multicast gap %d-%d (%s)", e.From, e.To, e.Reason))
	case multicast.SessionChange:
		if e.Old == 0 {
			return 0, nil // the first session heard: joined before the snapshot was read
		}
		return 0, w.resync("the sender restarted")
	case multicast.Message:
		f := &stomp.Frame{Command: stomp.CmdMessage, Body: e.Body}
		for _, h := range e.Headers {
			f.Headers = append(f.Headers, stomp.Header{Key: h.Key, Value: h.Value})
		}
		if v, ok := f.Headers.Lookup(appliance.KVLostRevisionHeader); ok {
			lost, _ := strconv.ParseUint(v, 10, 64)
			if lost > w.applied {
				return 0, w.resync(fmt.Sprintf("heraldd did not send revisions up to %d (its queue for the channel was full)", lost))
			}
			return 0, nil
		}
		ent := entryOf(f)
		switch {
		case ent.Revision <= w.applied:
			return 0, nil // in the snapshot, or a repair seen twice
		case ent.Revision > w.applied+1:
			if err := w.resync(fmt.Sprintf("revisions %d-%d missing", w.applied+1, ent.Revision-1)); err != nil {
				return 0, err
			}
			if ent.Revision != w.applied+1 {
				return 0, nil // the snapshot has it, or a later gap will say
			}
		}
		w.applied = ent.Revision
		w.resyncs = 0
		key := strings.TrimPrefix(ent.Key, w.bucket+".")
		if !kvcore.Match(w.pattern, key) {
			return 0, nil
		}
		return 1, w.print(ent)
	}
	return 0, nil
}

// resync says why, then reads the bucket again over STOMP.
func (w *kvMulticastWatch) resync(why string) error {
	w.resyncs++
	if w.resyncs > maxResyncs {
		return fmt.Errorf("watch %s by multicast: %d snapshots re-read in a row without a change getting through (last: %s); check the channel with herald listen --stats, or watch over STOMP without --group", w.name, maxResyncs, why)
	}
	var err error
	if w.enc != nil {
		err = w.enc.Encode(map[string]any{"resync": map[string]any{"reason": why, "after": w.applied}})
	} else {
		_, err = fmt.Fprintf(w.out, "#RESYNC\t%d\t%s\n", w.applied, why)
	}
	if err != nil {
		return stdoutOK(err)
	}
	return w.snapshot()
}

// snapshot reads the matching keys and the bucket's revision over STOMP
// and prints them as kv watch does.
func (w *kvMulticastWatch) snapshot() error {
	r, err := openKV(w.cCtx, kvSnapshotTimeout, kvWatchHeartBeat)
	if err != nil {
		return err
	}
	defer r.close()
	msgs, rev, err := r.collect("/kv/"+w.name, "watch "+w.name, "kv-snapshot-complete")
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(rev, 10, 64)
	if err != nil {
		return fmt.Errorf("watch %s: snapshot marker %q is not a revision", w.name, rev)
	}
	for _, m := range msgs {
		if err := w.print(entryOf(m)); err != nil {
			return err
		}
	}
	w.applied = n
	return stdoutOK(printKVMarker(w.out, w.enc, n))
}

// kvSnapshotTimeout bounds the wait for a snapshot over STOMP.
const kvSnapshotTimeout = 30 * time.Second

func (w *kvMulticastWatch) print(e kvEntry) error {
	return stdoutOK(printKVEntry(w.out, w.enc, e))
}
