package appliance

import (
	"crypto/tls"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/herald-mq/herald/appliance/stomp"
)

// A configuration reload (SIGHUP) applies what can change without dropping
// a client, and reports the rest, which keeps its old value until a
// restart. Every key of Config is classified in reloadKeys; a test fails
// for a key that is not (TestReload_EveryKeyClassified).

// reloadClass says whether a changed key is applied by Broker.Reload.
type reloadClass uint8

const (
	restartOnly reloadClass = iota
	reloadable
)

// reloadKeys classifies every key by its TOML path. A list ([[...]]) is one
// key: its entries change together. Reloadable keys take effect:
//   - stomp connection limits and heart-beats: for new connections, and
//     max_subscriptions for new subscriptions;
//   - stomp frame limits, timeouts and max_output_bytes, max_transaction_*:
//     from the next frame, write or transaction of every connection (a
//     max_header_line raised above 64 KiB: new connections only, the
//     read buffer of a connection is sized when it opens);
//   - queue settings and policies: through each queue core's SetConfig
//     (limits from the next SEND, max_deliveries and back-off from the next
//     NACK, the window from the next page-in); prefetch, auto_prefetch and
//     ack_timeout for new subscriptions;
//   - topic buffers and slow_subscriber from the next message; last_value
//     and last_value_max_bytes at once (stored last values are trimmed to
//     the new bound, all dropped when last_value is turned off);
//   - log.level: applied by the daemon (heraldd), not the broker.
//
// The users, permissions and TLS certificates of a future [auth] or [tls]
// section belong here as reloadable keys, applied in Broker.Reload.
var reloadKeys = map[string]reloadClass{
	"data_dir": restartOnly,

	"stomp.listen":                      restartOnly,
	"stomp.max_connections":             reloadable,
	"stomp.max_connections_per_address": reloadable,
	"stomp.max_subscriptions":           reloadable,
	"stomp.max_header_bytes":            reloadable,
	"stomp.max_headers":                 reloadable,
	"stomp.max_header_line":             reloadable,
	"stomp.max_body_bytes":              reloadable,
	"stomp.heartbeat_send":              reloadable,
	"stomp.heartbeat_receive":           reloadable,
	"stomp.connect_timeout":             reloadable,
	"stomp.frame_timeout":               reloadable,
	"stomp.idle_timeout":                reloadable,
	"stomp.write_timeout":               reloadable,
	"stomp.max_transaction_frames":      reloadable,
	"stomp.max_transactions":            reloadable,
	"stomp.max_output_bytes":            reloadable,
	"stomp.max_transaction_bytes":       reloadable,
	"stomp.max_journal_pending_bytes":   reloadable,

	// Retention applies from its next round; paging from the next read.
	"streams.max_age":            reloadable,
	"streams.max_bytes":          reloadable,
	"streams.max_count":          reloadable,
	"streams.max_streams":        reloadable,
	"streams.max_cursors":        reloadable, // from the next SUBSCRIBE
	"streams.page_bytes":         reloadable, // from the next retention round
	"streams.page_messages":      reloadable,
	"streams.tail_bytes":         reloadable, // from the next append
	"streams.retention_interval": reloadable,
	"streams.retention_batch":    reloadable,
	"streams.policy":             reloadable,

	"memory.budget_bytes": restartOnly, // the budget's halves are set at start

	// The users file and the certificates are read again on every
	// reload, changed or not (see Reload); the listener is opened once.
	"stomp.tls_listen":              restartOnly,
	"stomp.tls_cert":                reloadable,
	"stomp.tls_key":                 reloadable,
	"stomp.tls_client_ca":           reloadable,
	"auth.users_file":               reloadable,
	"auth.allow_anonymous":          reloadable,
	"auth.anonymous.read":           reloadable,
	"auth.anonymous.write":          reloadable,
	"auth.anonymous.create":         reloadable,
	"auth.max_connections_per_user": reloadable,
	"auth.command":                  restartOnly, // its runner is made at start
	"auth.command_timeout":          restartOnly,
	"auth.command_cache":            restartOnly,

	// The web listener is opened once; its certificates are stomp.tls_*.
	// Origins and SSE bounds apply to new requests.
	"web.listen":           restartOnly,
	"web.tls":              restartOnly,
	"web.allowed_origins":  reloadable,
	"web.sse_buffer_bytes": reloadable,
	"web.sse_heartbeat":    reloadable,

	// The journal is opened once with these.
	"journal.sync":                restartOnly,
	"journal.compress":            restartOnly,
	"journal.wal_limit_bytes":     restartOnly,
	"journal.checkpoint_interval": restartOnly,
	"journal.min_free_bytes":      restartOnly,
	"journal.mmap_bytes":          restartOnly,

	"queues.prefetch":             reloadable,
	"queues.auto_prefetch":        reloadable,
	"queues.max_deliveries":       reloadable,
	"queues.redelivery_delay_min": reloadable,
	"queues.redelivery_delay_max": reloadable,
	"queues.ack_timeout":          reloadable,
	"queues.dedup_window":         restartOnly, // the journal's
	"queues.dedup_max":            restartOnly, // the journal's
	"queues.max_messages":         reloadable,
	"queues.max_bytes":            reloadable,
	"queues.full_policy":          reloadable,
	"queues.block_timeout":        reloadable,
	"queues.memory_window":        reloadable,
	"queues.memory_window_bytes":  reloadable,
	"queues.backlog_cache_bytes":  reloadable,
	"queues.expired_to_dlq":       reloadable,
	"queues.dead_letter_prefix":   restartOnly, // which queues are dead-letter queues
	"queues.max_queues":           reloadable,
	"queues.policy":               reloadable,

	"topics.subscriber_buffer":       reloadable,
	"topics.subscriber_buffer_bytes": reloadable,
	"topics.slow_subscriber":         reloadable,
	"topics.last_value":              reloadable,
	"topics.last_value_max_bytes":    reloadable,
	"topics.idle_forget":             restartOnly, // the forgetting ticker's period is set at start
	"topics.history":                 reloadable,  // rings are trimmed (or dropped) to the new rules
	"topics.history_max_bytes":       reloadable,

	"admin.socket":         restartOnly,
	"admin.metrics_listen": restartOnly,

	"log.level":  reloadable,
	"log.format": restartOnly,

	// A channel's sender (socket, session, rate limit, key) is made at
	// start; receivers would see a new session anyway. This covers every
	// key of a channel, lone_inline included.
	"multicast.channel": restartOnly,

	// Key-value limits apply from the next write, watch_buffer_bytes from
	// the next change delivered (kv.go reads them from the configuration
	// in force each time).
	"kv.max_value_bytes":    reloadable,
	"kv.max_keys":           reloadable,
	"kv.max_bytes":          reloadable,
	"kv.max_total_bytes":    reloadable,
	"kv.max_buckets":        reloadable,
	"kv.watch_buffer_bytes": reloadable,
	"kv.history":            reloadable, // from the next write of each key
	"kv.bucket":             reloadable, // ttl: for the next put
	"kv.max_lock_names":     reloadable, // for the next new name
	"kv.max_lock_waiters":   reloadable, // for the next request

	// Bridges are started once, at start; a change needs a restart.
	"bridge": restartOnly,
}

// configKeys lists the TOML path of every key of Config with its field
// index path: struct sections are walked, a Duration, a scalar or a list
// is one key.
func configKeys() map[string][]int {
	out := map[string][]int{}
	var walk func(t reflect.Type, prefix string, idx []int)
	walk = func(t reflect.Type, prefix string, idx []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			at := append(append([]int(nil), idx...), i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration{}) {
				walk(f.Type, path, at)
				continue
			}
			out[path] = at
		}
	}
	walk(reflect.TypeOf(Config{}), "", nil)
	return out
}

// ConfigChanges are the keys whose values differ between two configs,
// sorted.
type ConfigChanges struct {
	Reloaded []string // applied by Reload
	Restart  []string // keep their old value until a restart
}

// keepForRestart moves keys that changed from Reloaded to Restart: their
// old value stays in force until a restart.
func (ch *ConfigChanges) keepForRestart(keys ...string) {
	for _, k := range keys {
		if i := slices.Index(ch.Reloaded, k); i >= 0 {
			ch.Reloaded = slices.Delete(ch.Reloaded, i, i+1)
			ch.Restart = append(ch.Restart, k)
		}
	}
	sort.Strings(ch.Restart)
}

// DiffConfig compares old and new key by key.
func DiffConfig(old, new Config) ConfigChanges {
	var ch ConfigChanges
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(new)
	for path, idx := range configKeys() {
		if reflect.DeepEqual(ov.FieldByIndex(idx).Interface(), nv.FieldByIndex(idx).Interface()) {
			continue
		}
		if reloadKeys[path] == reloadable {
			ch.Reloaded = append(ch.Reloaded, path)
		} else {
			ch.Restart = append(ch.Restart, path)
		}
	}
	sort.Strings(ch.Reloaded)
	sort.Strings(ch.Restart)
	return ch
}

// mergeReloadable returns old with the reloadable keys taken from new: the
// config in force after a reload.
func mergeReloadable(old, new Config) Config {
	out := old
	ov, nv := reflect.ValueOf(&out).Elem(), reflect.ValueOf(new)
	for path, idx := range configKeys() {
		if reloadKeys[path] == reloadable {
			ov.FieldByIndex(idx).Set(nv.FieldByIndex(idx))
		}
	}
	return out
}

// Config returns the configuration in force (after any reload). Do not
// modify it.
func (b *Broker) Config() *Config { return b.conf.Load() }

// cfg is the configuration in force. Every read takes it anew, so that a
// reload applies from the next use; it is never modified, only replaced.
func (b *Broker) cfg() *Config { return b.conf.Load() }

// readerLimits are the frame limits of stomp.* in force.
func (b *Broker) readerLimits() stomp.Limits { return limitsOf(b.cfg()) }

func limitsOf(c *Config) stomp.Limits {
	return stomp.Limits{
		MaxHeaderBytes: c.Stomp.MaxHeaderBytes,
		MaxHeaders:     c.Stomp.MaxHeaders,
		MaxHeaderLine:  c.Stomp.MaxHeaderLine,
		MaxBody:        c.Stomp.MaxBodyBytes,
	}
}

// syncLimits gives the session's reader the frame limits in force, when a
// reload changed them. The reader calls it as each frame starts (its first
// octet has arrived, its headers are still to be read).
func (s *session) syncLimits() {
	if c := s.b.cfg(); c != s.limitsOf {
		s.r.SetLimits(limitsOf(c))
		s.limitsOf = c
	}
}

// Reload validates c and applies its reloadable keys (reloadKeys): the
// config in force becomes the old one with those keys replaced, and every
// queue's core gets its new settings. An invalid c changes nothing. The
// restart-only keys that differ are reported, not applied. Reloads are
// serialised; sessions and queues pick the new values up on their next use.
func (b *Broker) Reload(c Config) (ConfigChanges, error) {
	if err := c.Validate(); err != nil {
		return ConfigChanges{}, fmt.Errorf("invalid configuration, nothing changed:\n%w", err)
	}
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	old := b.cfg()
	ch := DiffConfig(*old, c)
	eff := mergeReloadable(*old, c)
	if (old.Stomp.TLSListen != "" || old.Web.Listen != "" && old.Web.TLS) && c.Stomp.TLSCert == "" && c.Stomp.TLSKey == "" {
		// TLS turned off in the file: its listeners (restart-only) run on
		// until a restart, with the certificate they have, which is then
		// restart-only too, not a reason to refuse the reload.
		eff.Stomp.TLSCert, eff.Stomp.TLSKey, eff.Stomp.TLSClientCA = old.Stomp.TLSCert, old.Stomp.TLSKey, old.Stomp.TLSClientCA
		ch.keepForRestart("stomp.tls_cert", "stomp.tls_key", "stomp.tls_client_ca")
	}
	// The users file and the certificates are read again whether or not
	// their keys changed (a user added, a certificate renewed under the
	// same name), before anything is applied: a file that does not load
	// refuses the whole reload.
	policy, warns, err := LoadAuth(eff)
	if err != nil {
		return ConfigChanges{}, fmt.Errorf("nothing changed: %w", err)
	}
	var tc *tls.Config
	if old.Stomp.TLSListen != "" || (old.Web.Listen != "" && old.Web.TLS) {
		if tc, err = TLSConfig(eff.Stomp); err != nil {
			return ConfigChanges{}, fmt.Errorf("nothing changed: %w", err)
		}
	}
	for _, w := range warns {
		b.log.Warn(w)
	}
	b.SetAuth(policy)
	if tc != nil {
		b.SetTLS(tc)
	}
	if len(ch.Reloaded) == 0 {
		return ch, nil
	}
	b.conf.Store(&eff)
	// Queues made from now on take eff; those made before are all in
	// b.queues now.
	b.mu.Lock()
	queues := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		queues = append(queues, q)
	}
	b.mu.Unlock()
	for _, q := range queues {
		qc := eff.Queues.For(q.name)
		if reflect.DeepEqual(qc, *q.cfg()) {
			continue
		}
		cc := coreConfig(qc, q.isDLQ)
		// Under the old settings first: they say whether producers may
		// wait for space (SetConfig wakes them).
		q.run(func(now int64) { q.core.SetConfig(cc, now) })
		q.conf.Store(&qc)
	}
	maxLV := min(eff.Topics.LastValueMaxBytes, b.mem.limit/8)
	if !eff.Topics.LastValue {
		maxLV = 0
	}
	b.reloadHistory(b.now().UnixMilli())
	if n := b.topics.trimLast(maxLV); n > 0 {
		b.log.Info("last values dropped for the reloaded topics settings", "dropped", n, "last_value", eff.Topics.LastValue, "last_value_max_bytes", eff.Topics.LastValueMaxBytes)
	}
	return ch, nil
}

// trimLast drops the least recently updated last values while all weigh
// more than maxBytes (0: all), and returns how many it dropped.
func (r *topicRegistry) trimLast(maxBytes int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for r.lvBytes > maxBytes && r.lvOrder.Len() > 0 {
		r.dropLast(r.lvOrder.Front().Value.(*topicStats))
		r.lvEvicted.Add(1) // dropped for the byte bound, as in setLast
		n++
	}
	return n
}
