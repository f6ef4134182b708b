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
	dKVExpired    = prometheus.NewDesc("herald_kv_expired_total", "Key-value keys deleted by their TTL.", nil, nil)
	dKVTxns       = prometheus.NewDesc("herald_kv_transactions_total", "Key-value transactions (BEGIN..COMMIT of /kv/ SENDs) committed.", nil, nil)
	dLockGrants   = prometheus.NewDesc("herald_lock_grants_total", "Advisory locks granted (fencing tokens given).", nil, nil)
	dLockFenced   = prometheus.NewDesc("herald_lock_fenced_total", "Writes refused for a stale fencing token (if-fence).", nil, nil)
	dLockNames    = prometheus.NewDesc("herald_lock_names", "Advisory lock names known (kv.max_lock_names bounds them).", nil, nil)
	dKVMcSent     = prometheus.NewDesc("herald_kv_multicast_changes_total", "Key-value changes sent to the multicast channels carrying their bucket.", nil, nil)
	dKVMcDropped  = prometheus.NewDesc("herald_kv_multicast_dropped_total", "Key-value changes not sent to multicast: more than kv.watch_buffer_bytes waited (receivers re-read the bucket).", nil, nil)
	dKVMcMarkers  = prometheus.NewDesc("herald_kv_multicast_lost_markers_total", "kv-lost-revision markers sent to multicast after changes that were not.", nil, nil)
	kvDescriptors = []*prometheus.Desc{dKVPuts, dKVDeletes, dKVConflicts, dKVDropped, dKVWatchers, dKVKeys, dKVBytes, dKVRevision, dKVExpired, dKVTxns, dLockGrants, dLockFenced, dLockNames, dKVMcSent, dKVMcDropped, dKVMcMarkers}
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
	ch <- prometheus.MustNewConstMetric(dKVExpired, prometheus.CounterValue, float64(st.Expired))
	ch <- prometheus.MustNewConstMetric(dKVTxns, prometheus.CounterValue, float64(st.Transactions))
	ms := c.b.KVMirrorStats()
	ch <- prometheus.MustNewConstMetric(dKVMcSent, prometheus.CounterValue, float64(ms.Sent))
	ch <- prometheus.MustNewConstMetric(dKVMcDropped, prometheus.CounterValue, float64(ms.Dropped))
	ch <- prometheus.MustNewConstMetric(dKVMcMarkers, prometheus.CounterValue, float64(ms.Markers))
	ls := c.b.LockStats()
	ch <- prometheus.MustNewConstMetric(dLockGrants, prometheus.CounterValue, float64(ls.Grants))
	ch <- prometheus.MustNewConstMetric(dLockFenced, prometheus.CounterValue, float64(ls.Fenced))
	ch <- prometheus.MustNewConstMetric(dLockNames, prometheus.GaugeValue, float64(ls.Names))
	for _, bk := range st.Buckets {
		ch <- prometheus.MustNewConstMetric(dKVKeys, prometheus.GaugeValue, float64(bk.Keys), bk.Name)
		ch <- prometheus.MustNewConstMetric(dKVBytes, prometheus.GaugeValue, float64(bk.Bytes), bk.Name)
		ch <- prometheus.MustNewConstMetric(dKVRevision, prometheus.GaugeValue, float64(bk.Revision), bk.Name)
	}
}
