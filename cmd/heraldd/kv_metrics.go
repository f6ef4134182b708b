package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-mq/herald/appliance"
)

var (
	dKVPuts       = prometheus.NewDesc("herald_kv_puts_total", "Key-value puts committed.", nil, nil)
	dKVDeletes    = prometheus.NewDesc("herald_kv_deletes_total", "Key-value deletes committed.", nil, nil)
	dKVConflicts  = prometheus.NewDesc("herald_kv_conflicts_total", "Compare-and-set puts refused for a revision conflict (if-revision).", nil, nil)
	dKVDropped    = prometheus.NewDesc("herald_kv_watchers_dropped_total", "Watchers disconnected for more than kv.watch_buffer_bytes waiting.", nil, nil)
	dKVWatchers   = prometheus.NewDesc("herald_kv_watchers", "Open key-value watches.", nil, nil)
	dKVKeys       = prometheus.NewDesc("herald_kv_keys", "Keys in a key-value bucket.", []string{"bucket"}, nil)
	dKVBytes      = prometheus.NewDesc("herald_kv_bytes", "Bytes of the values in a key-value bucket.", []string{"bucket"}, nil)
	dKVRevision   = prometheus.NewDesc("herald_kv_revision", "A key-value bucket's latest revision.", []string{"bucket"}, nil)
	kvDescriptors = []*prometheus.Desc{dKVPuts, dKVDeletes, dKVConflicts, dKVDropped, dKVWatchers, dKVKeys, dKVBytes, dKVRevision}
)

// kvCollector reads the key-value store's counts at scrape time.
type kvCollector struct{ b *appliance.Broker }

func (c kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range kvDescriptors {
		ch <- d
	}
}

func (c kvCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.KVStats()
	ch <- prometheus.MustNewConstMetric(dKVPuts, prometheus.CounterValue, float64(st.Puts))
	ch <- prometheus.MustNewConstMetric(dKVDeletes, prometheus.CounterValue, float64(st.Deletes))
	ch <- prometheus.MustNewConstMetric(dKVConflicts, prometheus.CounterValue, float64(st.Conflicts))
	ch <- prometheus.MustNewConstMetric(dKVDropped, prometheus.CounterValue, float64(st.WatchersDropped))
	ch <- prometheus.MustNewConstMetric(dKVWatchers, prometheus.GaugeValue, float64(st.Watchers))
	for _, bk := range st.Buckets {
		ch <- prometheus.MustNewConstMetric(dKVKeys, prometheus.GaugeValue, float64(bk.Keys), bk.Name)
		ch <- prometheus.MustNewConstMetric(dKVBytes, prometheus.GaugeValue, float64(bk.Bytes), bk.Name)
		ch <- prometheus.MustNewConstMetric(dKVRevision, prometheus.GaugeValue, float64(bk.Revision), bk.Name)
	}
}
