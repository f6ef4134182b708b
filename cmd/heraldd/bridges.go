package main

import (
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/bridge/bridgeview"
)

// newBridges makes the [[bridge]]s (reading their TLS files) before the
// daemon listens: one that cannot be made refuses the start (exit 78)
// before any client connected. startBridges starts them once the STOMP
// listener is up: each connects to this daemon over loopback TCP.
func (d *daemon) newBridges() error {
	for _, bc := range d.cfg.Bridges {
		b, err := bridge.New(bridge.Options{
			Config: bc,
			// LocalAddr: set by startBridges once listening.
			// The listener's frame limits (a reload's from the next
			// connection): a message this daemon accepted is one its
			// bridge can read.
			LocalLimitsFunc: func() stomp.Limits { return appliance.BridgeLocalLimits(d.broker.Config()) },
			Logger:          d.log.With("component", "bridge"),
			QueueDepth: func(name string) (int64, int64, bool) {
				q, ok := d.broker.Queue(name)
				return int64(q.Messages), q.Bytes, ok
			},
		})
		if err != nil {
			return err
		}
		d.bridges = append(d.bridges, b)
	}
	return nil
}

// startBridges starts the bridges newBridges made, connecting to this
// daemon's STOMP listener at stompAddr (an unspecified host replaced by the
// loopback address).
func (d *daemon) startBridges(stompAddr net.Addr) {
	if len(d.bridges) == 0 {
		return
	}
	addr := stompAddr.String()
	if ta, ok := stompAddr.(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) {
		host := "127.0.0.1"
		if ta.IP != nil && ta.IP.To4() == nil {
			host = "::1"
		}
		addr = net.JoinHostPort(host, fmt.Sprint(ta.Port))
	}
	for _, b := range d.bridges {
		b.SetLocalAddr(addr)
		b.Start()
	}
	if d.adm.server != nil {
		d.adm.server.SetBridges(bridgeStats{d})
	}
	d.adminMetrics().Registry().MustRegister(bridgeCollector{d})
}

// stopBridges stops every bridge; their messages in flight stay in the
// journal (out) or unacknowledged at the peer (in).
func (d *daemon) stopBridges() {
	for _, b := range d.bridges {
		b.Close()
	}
	d.bridges = nil
}

// bridgeStats adapts the bridges to admin.BridgeStats.
type bridgeStats struct{ d *daemon }

func (s bridgeStats) Bridges() []bridgeview.View {
	out := make([]bridgeview.View, 0, len(s.d.bridges))
	for _, b := range s.d.bridges {
		out = append(out, b.View())
	}
	return out
}

var (
	dBrUp         = prometheus.NewDesc("herald_bridge_up", "1 while the bridge direction's link is up.", []string{"bridge", "direction"}, nil)
	dBrFailing    = prometheus.NewDesc("herald_bridge_failing", "1 while the bridge direction is down with an error.", []string{"bridge", "direction"}, nil)
	dBrLag        = prometheus.NewDesc("herald_bridge_lag_messages", "Messages waiting to cross the bridge (out: the local queues' depth; in: the consumer's pending and unacknowledged).", []string{"bridge", "direction"}, nil)
	dBrLagBytes   = prometheus.NewDesc("herald_bridge_lag_bytes", "Bytes waiting to cross the bridge, where known (out).", []string{"bridge", "direction"}, nil)
	dBrInFlight   = prometheus.NewDesc("herald_bridge_in_flight", "Messages sent across and not yet acknowledged by the other side.", []string{"bridge", "direction"}, nil)
	dBrConfirmed  = prometheus.NewDesc("herald_bridge_messages_total", "Messages the other side acknowledged (carried exactly once).", []string{"bridge", "direction"}, nil)
	dBrResent     = prometheus.NewDesc("herald_bridge_resent_total", "Messages sent again after a link failure (the other side keeps one copy by its dedup id).", []string{"bridge", "direction"}, nil)
	dBrSkipped    = prometheus.NewDesc("herald_bridge_loops_refused_total", "Messages not carried because they already left this appliance or crossed max_hops bridges.", []string{"bridge", "direction"}, nil)
	dBrDropped    = prometheus.NewDesc("herald_bridge_topic_dropped_total", "Topic messages dropped while the link was down or its window full, or refused by NATS (topics are best effort).", []string{"bridge", "direction"}, nil)
	dBrHdrDropped = prometheus.NewDesc("herald_bridge_headers_dropped_total", "Headers dropped from messages crossing the bridge because the other side would refuse or misread them (coming in, a transaction header or an invalid expires or delay; either way, a reply-to naming a temporary queue).", []string{"bridge", "direction"}, nil)
	dBrDeadLetter = prometheus.NewDesc("herald_bridge_dead_lettered_total", "Queue messages the other side refuses for good (over NATS's max_payload or the stream's max_msg_size, headers over 64 KiB), sent to their dead-letter queue here.", []string{"bridge", "direction"}, nil)
	dBrReconnects = prometheus.NewDesc("herald_bridge_reconnects_total", "Times the link came back after a failure.", []string{"bridge", "direction"}, nil)
	dBrFailures   = prometheus.NewDesc("herald_bridge_failures_total", "Link failures: failed connection attempts, errors, lost connections, acknowledgements overdue.", []string{"bridge", "direction"}, nil)
	dBrRefused    = prometheus.NewDesc("herald_bridge_refused_total", "Publishes JetStream refused because the message before them was not the last stored (out; each is sent again in order).", []string{"bridge", "direction"}, nil)
	dBrHeldBack   = prometheus.NewDesc("herald_bridge_held_back_messages", "Messages held back to keep stream order, waiting for an earlier one the server delivers again (in, JetStream).", []string{"bridge", "direction"}, nil)
	dBrHeldBackB  = prometheus.NewDesc("herald_bridge_held_back_bytes", "Bytes held back to keep stream order (in, JetStream; bounded by max_hold_bytes).", []string{"bridge", "direction"}, nil)
	dBrGaps       = prometheus.NewDesc("herald_bridge_gaps_total", "Ranges of stream messages removed (retention, deletion) before the bridge brought them in (in, JetStream).", []string{"bridge", "direction"}, nil)
	dBrHBMissed   = prometheus.NewDesc("herald_bridge_heartbeats_missed_total", "Pulls that missed two of their idle heartbeats (in, JetStream: the consumer's leader gone, the link or the server stalled; the bridge pulls again).", []string{"bridge", "direction"}, nil)
	bridgeDescs   = []*prometheus.Desc{dBrUp, dBrFailing, dBrLag, dBrLagBytes, dBrInFlight, dBrConfirmed, dBrResent, dBrSkipped, dBrDropped, dBrHdrDropped, dBrDeadLetter, dBrReconnects, dBrFailures, dBrRefused, dBrHeldBack, dBrHeldBackB, dBrGaps, dBrHBMissed}
)

// bridgeCollector reads the bridges' views at scrape time.
type bridgeCollector struct{ d *daemon }

func (c bridgeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range bridgeDescs {
		ch <- d
	}
}

func (c bridgeCollector) Collect(ch chan<- prometheus.Metric) {
	b01 := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, v := range (bridgeStats{c.d}).Bridges() {
		for _, d := range v.Directions {
			l := []string{v.Name, d.Direction}
			ch <- prometheus.MustNewConstMetric(dBrUp, prometheus.GaugeValue, b01(d.State == "up"), l...)
			ch <- prometheus.MustNewConstMetric(dBrFailing, prometheus.GaugeValue, b01(d.Failing), l...)
			ch <- prometheus.MustNewConstMetric(dBrLag, prometheus.GaugeValue, float64(d.LagMessages), l...)
			if d.LagBytes >= 0 {
				ch <- prometheus.MustNewConstMetric(dBrLagBytes, prometheus.GaugeValue, float64(d.LagBytes), l...)
			}
			ch <- prometheus.MustNewConstMetric(dBrInFlight, prometheus.GaugeValue, float64(d.InFlight), l...)
			ch <- prometheus.MustNewConstMetric(dBrConfirmed, prometheus.CounterValue, float64(d.Confirmed), l...)
			ch <- prometheus.MustNewConstMetric(dBrResent, prometheus.CounterValue, float64(d.Resent), l...)
			ch <- prometheus.MustNewConstMetric(dBrSkipped, prometheus.CounterValue, float64(d.Skipped), l...)
			ch <- prometheus.MustNewConstMetric(dBrDropped, prometheus.CounterValue, float64(d.Dropped), l...)
			ch <- prometheus.MustNewConstMetric(dBrHdrDropped, prometheus.CounterValue, float64(d.HeadersDropped), l...)
			ch <- prometheus.MustNewConstMetric(dBrDeadLetter, prometheus.CounterValue, float64(d.DeadLettered), l...)
			ch <- prometheus.MustNewConstMetric(dBrReconnects, prometheus.CounterValue, float64(d.Reconnects), l...)
			ch <- prometheus.MustNewConstMetric(dBrFailures, prometheus.CounterValue, float64(d.Failures), l...)
			ch <- prometheus.MustNewConstMetric(dBrRefused, prometheus.CounterValue, float64(d.Refused), l...)
			ch <- prometheus.MustNewConstMetric(dBrHeldBack, prometheus.GaugeValue, float64(d.HeldBack), l...)
			ch <- prometheus.MustNewConstMetric(dBrHeldBackB, prometheus.GaugeValue, float64(d.HeldBackBytes), l...)
			ch <- prometheus.MustNewConstMetric(dBrGaps, prometheus.CounterValue, float64(d.Gaps), l...)
			ch <- prometheus.MustNewConstMetric(dBrHBMissed, prometheus.CounterValue, float64(d.HeartbeatsMissed), l...)
		}
	}
}

var _ admin.BridgeStats = bridgeStats{}
