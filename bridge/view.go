package bridge

import (
	"context"
	"github.com/herald-mq/herald/bridge/bridgeview"
	"strings"
	"time"
)

// View and DirView are bridgeview's: the admin API and the CLI use them
// without linking the NATS client.
type (
	View    = bridgeview.View
	DirView = bridgeview.DirView
)

// View returns the bridge's state.
func (b *Bridge) View() View {
	v := View{Name: b.cfg.Name, Kind: b.cfg.Kind, Peer: b.cfg.Host}
	if b.cfg.Kind == "jetstream" {
		v.Peer = strings.Join(b.cfg.URLs, ",")
	}
	for _, w := range b.workers {
		w.mu.Lock()
		d := w.view
		w.mu.Unlock()
		d.Direction = w.dir
		if d.State == "" {
			d.State = "down"
		}
		v.Directions = append(v.Directions, d)
	}
	return v
}

// publishView copies the core's state into the view (the worker's
// goroutine only); the lag is read at most once a second.
func (w *worker) publishView(force bool) {
	now := time.Now()
	st := w.core.Stats()
	w.mu.Lock()
	defer w.mu.Unlock()
	v := &w.view
	v.State = w.core.State().String()
	v.InFlight = st.InFlight
	v.Held, v.HeldBytes = st.PendingItems, st.PendingBytes
	v.Taken, v.Forwarded, v.Resent, v.Confirmed, v.Skipped = st.Taken, st.Forwarded, st.Resent, st.Confirmed, st.Skipped
	v.Reconnects, v.Failures, v.Dropped = st.Reconnects, st.Failures, w.dropped.Load()
	v.HeadersDropped = w.headersDropped.Load()
	v.DeadLettered = w.deadLettered.Load()
	v.HeartbeatsMissed = w.heartbeatsMissed.Load()
	v.Refused, v.SharedStream = st.Refused, st.Shared
	if w.seq != nil {
		ss := w.seq.Stats()
		v.HeldBack, v.HeldBackBytes, v.HeldBackTotal, v.Gaps = ss.Held, ss.HeldBytes, ss.HeldTotal, ss.Gaps
	}
	v.Failing = w.core.State() != LinkUp && v.LastError != ""
	if w.core.State() == LinkUp {
		v.FailingSince = ""
	}
	dt := now.Sub(w.lastRateAt)
	if dt < time.Second && !force {
		return
	}
	v.Rate = float64(st.Confirmed-w.lastConfirmed) / dt.Seconds()
	w.lastConfirmed, w.lastRateAt = st.Confirmed, now
	w.mu.Unlock()
	msgs, bytes := w.lag()
	w.mu.Lock()
	v.LagMessages, v.LagBytes = msgs, bytes
}

func (w *worker) lag() (int64, int64) {
	if w.dir == "out" {
		var msgs, bytes int64
		if w.o.QueueDepth == nil {
			return 0, -1
		}
		for _, m := range w.maps {
			if name, ok := strings.CutPrefix(m.Local, "/queue/"); ok {
				if n, b, ok := w.o.QueueDepth(name); ok {
					msgs += n
					bytes += b
				}
			}
		}
		return msgs, bytes
	}
	if j, ok := w.remote.(*jsIn); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if n, ok := j.lag(ctx); ok {
			return n, -1
		}
	}
	return 0, -1
}
