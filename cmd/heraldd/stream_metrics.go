package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-mq/herald/appliance"
)

var (
	dStreamAppends     = prometheus.NewDesc("herald_stream_appends_total", "Messages appended to a stream since the daemon started.", []string{"stream"}, nil)
	dStreamAppendBytes = prometheus.NewDesc("herald_stream_append_bytes_total", "Bytes appended to a stream since the daemon started.", []string{"stream"}, nil)
	dStreamMessages    = prometheus.NewDesc("herald_stream_messages", "Messages a stream holds.", []string{"stream"}, nil)
	dStreamBytes       = prometheus.NewDesc("herald_stream_bytes", "Bytes of the messages a stream holds.", []string{"stream"}, nil)
	dStreamFirst       = prometheus.NewDesc("herald_stream_first_offset", "A stream's first offset held.", []string{"stream"}, nil)
	dStreamNext        = prometheus.NewDesc("herald_stream_next_offset", "A stream's next offset (of the next append).", []string{"stream"}, nil)
	dStreamSubs        = prometheus.NewDesc("herald_stream_subscribers", "Subscriptions to a stream.", []string{"stream"}, nil)
	dStreamTrimmed     = prometheus.NewDesc("herald_stream_trimmed_total", "Messages of a stream removed by retention since the daemon started.", []string{"stream"}, nil)
	dStreamTailHits    = prometheus.NewDesc("herald_stream_tail_reads_total", "Pages served to a stream's subscribers from its in-memory tail (streams.tail_bytes).", []string{"stream"}, nil)
	dStreamJournalRead = prometheus.NewDesc("herald_stream_journal_reads_total", "Pages a stream's subscribers read from the journal.", []string{"stream"}, nil)
	dStreamTailBytes   = prometheus.NewDesc("herald_stream_tail_bytes", "Bytes of a stream's in-memory tail.", []string{"stream"}, nil)
	dStreamCursorLag   = prometheus.NewDesc("herald_stream_cursor_lag", "Messages a stream holds that a durable cursor has not acknowledged.", []string{"stream", "cursor"}, nil)
	dStreamCursorNext  = prometheus.NewDesc("herald_stream_cursor_offset", "A durable cursor's next offset (the first it has not acknowledged).", []string{"stream", "cursor"}, nil)
	streamDescriptors  = []*prometheus.Desc{dStreamAppends, dStreamAppendBytes, dStreamMessages, dStreamBytes, dStreamFirst, dStreamNext,
		dStreamSubs, dStreamTrimmed, dStreamTailHits, dStreamJournalRead, dStreamTailBytes, dStreamCursorLag, dStreamCursorNext}
)

// streamCollector reads the streams' figures at scrape time (memory only:
// no journal read).
type streamCollector struct{ b *appliance.Broker }

func (c streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range streamDescriptors {
		ch <- d
	}
}

func (c streamCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.b.StreamViews() {
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), s.Name)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, s.Name)
		}
		counter(dStreamAppends, s.Appends)
		counter(dStreamAppendBytes, s.AppendBytes)
		counter(dStreamTrimmed, s.Trimmed)
		counter(dStreamTailHits, s.TailHits)
		counter(dStreamJournalRead, s.TailReads)
		gauge(dStreamMessages, float64(s.Messages))
		gauge(dStreamBytes, float64(s.Bytes))
		gauge(dStreamFirst, float64(s.FirstOffset))
		gauge(dStreamNext, float64(s.NextOffset))
		gauge(dStreamSubs, float64(s.Subscribers))
		gauge(dStreamTailBytes, float64(s.TailBytes))
		for _, cu := range s.Cursors {
			ch <- prometheus.MustNewConstMetric(dStreamCursorLag, prometheus.GaugeValue, float64(cu.Lag), s.Name, cu.Name)
			ch <- prometheus.MustNewConstMetric(dStreamCursorNext, prometheus.GaugeValue, float64(cu.Next), s.Name, cu.Name)
		}
	}
}
