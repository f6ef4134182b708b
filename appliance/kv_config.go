package appliance

import (
	"fmt"

	"github.com/herald-mq/herald/appliance/kvcore"
)

// KVConfig is the [kv] section: limits of the key-value buckets
// (/kv/BUCKET.KEY). A bucket exists once a key is written to it; these
// defaults bound every bucket, [[kv.bucket]] entries override them by name.
type KVConfig struct {
	MaxValueBytes int   `toml:"max_value_bytes" json:"max_value_bytes"` // one value
	MaxKeys       int   `toml:"max_keys" json:"max_keys"`               // live keys of one bucket
	MaxBytes      int64 `toml:"max_bytes" json:"max_bytes"`             // keys, content types and values of one bucket
	MaxTotalBytes int64 `toml:"max_total_bytes" json:"max_total_bytes"` // of every bucket together (all held in memory)
	MaxBuckets    int   `toml:"max_buckets" json:"max_buckets"`
	// History: how many revisions of each key the journal keeps (the
	// current one included), for SUBSCRIBE with kv-history:true.
	History int `toml:"history" json:"history"`
	// WatchBufferBytes: a change for a watcher whose connection has more
	// than this waiting to be written ends that connection (an ERROR
	// naming this key), never a silent gap.
	WatchBufferBytes int64 `toml:"watch_buffer_bytes" json:"watch_buffer_bytes"`
	// MaxLockNames bounds the advisory lock names (/lock/NAME) known: each
	// keeps its last fencing token, in memory and in the journal, for good.
	MaxLockNames int `toml:"max_lock_names" json:"max_lock_names"`
	// MaxLockWaiters bounds the requests waiting for one lock.
	MaxLockWaiters int              `toml:"max_lock_waiters" json:"max_lock_waiters"`
	Bucket         []KVBucketConfig `toml:"bucket" json:"bucket"`
}

// KVBucketConfig overrides the [kv] limits for one bucket; 0 inherits.
type KVBucketConfig struct {
	Name          string `toml:"name" json:"name"`
	MaxValueBytes int    `toml:"max_value_bytes" json:"max_value_bytes"`
	MaxKeys       int    `toml:"max_keys" json:"max_keys"`
	MaxBytes      int64  `toml:"max_bytes" json:"max_bytes"`
	History       int    `toml:"history" json:"history"`
	// TTL: every put to the bucket without a kv-ttl header expires this
	// long after it (0: never).
	TTL Duration `toml:"ttl" json:"ttl"`
}

func defaultKVConfig() KVConfig {
	return KVConfig{
		MaxValueBytes:    1 << 20,
		MaxKeys:          10000,
		MaxBytes:         16 << 20,
		MaxTotalBytes:    64 << 20,
		MaxBuckets:       100,
		History:          1,
		WatchBufferBytes: 32 << 20,
		MaxLockNames:     10000,
		MaxLockWaiters:   1000,
	}
}

// Bounds of the [kv] keys.
const (
	kvMaxValueBytes = 64 << 20
	kvMaxKeys       = 10_000_000
	kvMaxBytes      = 1 << 40
	kvMaxBuckets    = 100_000
	kvMaxHistory    = 64
)

// history returns how many revisions of each key of bucket are kept, and
// what the bucket's older revisions (all but the current ones) may weigh:
// its max_bytes, as its live values.
func (c *KVConfig) history(bucket string) (n int, olderBytes int64) {
	lim, _ := c.limits(bucket)
	n = c.History
	for _, b := range c.Bucket {
		if b.Name == bucket && b.History > 0 {
			n = b.History
		}
	}
	return n, lim.MaxBytes
}

// ttl returns the bucket's TTL in milliseconds (0: none).
func (c *KVConfig) ttl(bucket string) int64 {
	for _, b := range c.Bucket {
		if b.Name == bucket {
			return b.TTL.Milliseconds()
		}
	}
	return 0
}

// limits returns the limits of bucket, with where naming the keys that set
// them (for errors).
func (c *KVConfig) limits(bucket string) (lim kvcore.Limits, where string) {
	lim = kvcore.Limits{MaxValueBytes: c.MaxValueBytes, MaxKeys: c.MaxKeys, MaxBytes: c.MaxBytes, MaxBuckets: c.MaxBuckets, MaxTotalBytes: c.MaxTotalBytes}
	where = "kv"
	for i, b := range c.Bucket {
		if b.Name != bucket {
			continue
		}
		where = fmt.Sprintf("kv.bucket[%d] (%s) or kv", i, bucket)
		if b.MaxValueBytes > 0 {
			lim.MaxValueBytes = b.MaxValueBytes
		}
		if b.MaxKeys > 0 {
			lim.MaxKeys = b.MaxKeys
		}
		if b.MaxBytes > 0 {
			lim.MaxBytes = b.MaxBytes
		}
		break
	}
	return lim, where
}

func (c *Config) validateKV() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	k := &c.KV
	in := func(name string, v, lo, hi int64) {
		if v < lo || v > hi {
			bad("%s: %d: want %d to %d", name, v, lo, hi)
		}
	}
	in("kv.max_value_bytes", int64(k.MaxValueBytes), 1, kvMaxValueBytes)
	in("kv.max_keys", int64(k.MaxKeys), 1, kvMaxKeys)
	in("kv.max_bytes", k.MaxBytes, 1, kvMaxBytes)
	in("kv.max_total_bytes", k.MaxTotalBytes, 1, kvMaxBytes)
	in("kv.max_buckets", int64(k.MaxBuckets), 1, kvMaxBuckets)
	in("kv.watch_buffer_bytes", k.WatchBufferBytes, 1, kvMaxBytes)
	in("kv.history", int64(k.History), 1, kvMaxHistory)
	in("kv.max_lock_names", int64(k.MaxLockNames), 1, kvMaxKeys)
	in("kv.max_lock_waiters", int64(k.MaxLockWaiters), 1, kvMaxKeys)
	seen := map[string]bool{}
	for i, b := range k.Bucket {
		where := fmt.Sprintf("kv.bucket[%d]", i)
		if err := checkBucketName(b.Name); err != nil {
			bad("%s.name: %v", where, err)
		} else if seen[b.Name] {
			bad("%s.name: bucket %q is configured twice", where, b.Name)
		}
		seen[b.Name] = true
		in(where+".max_value_bytes", int64(b.MaxValueBytes), 0, kvMaxValueBytes)
		in(where+".max_keys", int64(b.MaxKeys), 0, kvMaxKeys)
		in(where+".max_bytes", b.MaxBytes, 0, kvMaxBytes)
		in(where+".history", int64(b.History), 0, kvMaxHistory)
		if ms := b.TTL.Milliseconds(); b.TTL.Duration < 0 || ms > kvcore.MaxTTL || (b.TTL.Duration > 0 && ms == 0) {
			bad("%s.ttl: %s: want 0 (never) or 1ms to 87600h", where, b.TTL)
		}
	}
	return errs
}

// checkBucketName: 1 to 64 bytes of letters, digits, - and _ (as NATS KV
// bucket names).
func checkBucketName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("bucket name %q: want 1 to 64 letters, digits, - or _", n)
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("bucket name %q: want 1 to 64 letters, digits, - or _", n)
		}
	}
	return nil
}
