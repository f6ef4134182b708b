package appliance

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// BridgeConfig is one [[bridge]]: a link to a NATS JetStream cluster or to
// another STOMP broker, carrying messages out of and into this appliance
// (package bridge). Bridges are restart-only: a reload reports a change.
type BridgeConfig struct {
	Name string `toml:"name" json:"name"`
	// Kind is "jetstream" or "stomp".
	Kind string `toml:"kind" json:"kind"`
	// Direction is "out", "in" or "both": which of the maps' directions run.
	Direction string `toml:"direction" json:"direction"`
	// URLs are the NATS servers (jetstream): "nats://host:4222", several
	// for a cluster.
	URLs []string `toml:"urls" json:"urls"`
	// Host is the STOMP peer's host:port (stomp).
	Host string `toml:"host" json:"host"`
	// Credentials at the peer: user and password (STOMP login and
	// passcode), or a token, or a NATS creds file.
	User      string `toml:"user" json:"user"`
	Password  string `toml:"password" json:"-"`
	Token     string `toml:"token" json:"-"`
	CredsFile string `toml:"creds_file" json:"creds_file"`
	// TLS to the peer; TLSCA verifies it (default: the system roots),
	// TLSCert and TLSKey are a client certificate.
	TLS     bool   `toml:"tls" json:"tls"`
	TLSCA   string `toml:"tls_ca" json:"tls_ca"`
	TLSCert string `toml:"tls_cert" json:"tls_cert"`
	TLSKey  string `toml:"tls_key" json:"tls_key"`
	// Stream is the JetStream stream; CreateStream creates it (with
	// StreamSubjects, default the maps' remote subjects, and Replicas) when
	// it does not exist, else it must exist.
	Stream         string   `toml:"stream" json:"stream"`
	CreateStream   bool     `toml:"create_stream" json:"create_stream"`
	StreamSubjects []string `toml:"stream_subjects" json:"stream_subjects"`
	Replicas       int      `toml:"replicas" json:"replicas"`
	// Durable names the JetStream consumer (or the STOMP subscription id)
	// of direction in; default "herald-" + appliance_id + "-" + name.
	Durable string `toml:"durable" json:"durable"`
	// ApplianceID names this appliance across the link: the prefix of
	// every dedup id sent out and the origin for loop prevention; default
	// the host name. Keep it stable and unique among bridged appliances.
	ApplianceID string `toml:"appliance_id" json:"appliance_id"`
	// MaxInFlight bounds the messages sent and not yet acknowledged by the
	// other side, each way (and the local prefetch).
	MaxInFlight int `toml:"max_in_flight" json:"max_in_flight"`
	// MaxHoldBytes bounds the bytes direction in (jetstream) holds back
	// while it waits for an earlier message the consumer will deliver
	// again (after a link failure), to keep stream order.
	MaxHoldBytes int64 `toml:"max_hold_bytes" json:"max_hold_bytes"`
	// MaxHops: a message that crossed this many bridges is not forwarded.
	MaxHops int `toml:"max_hops" json:"max_hops"`
	// ReconnectMin and ReconnectMax bound the back-off between attempts
	// (doubling, with jitter).
	ReconnectMin Duration `toml:"reconnect_min" json:"reconnect_min"`
	ReconnectMax Duration `toml:"reconnect_max" json:"reconnect_max"`
	// AckTimeout: a message the other side has not acknowledged after this
	// long counts as a link failure (it is sent again after reconnecting).
	// Direction in from JetStream also sets from it the consumer's ack wait
	// (3 x, at least 1 s) and the idle heartbeat of its pull requests
	// (within 1 s..5 s: a pull lost with a killed consumer leader is made
	// again after two missed).
	AckTimeout Duration `toml:"ack_timeout" json:"ack_timeout"`
	// LogInterval: a failing bridge logs its reason at most once this often.
	LogInterval Duration `toml:"log_interval" json:"log_interval"`
	// LocalLogin and LocalPasscode log the bridge in to this appliance's
	// STOMP listener when it has a users file.
	LocalLogin    string `toml:"local_login" json:"local_login"`
	LocalPasscode string `toml:"local_passcode" json:"-"`
	// Map lists what crosses the link.
	Map []BridgeMap `toml:"map" json:"map"`
}

// BridgeMap maps local destinations to remote subjects (jetstream) or
// destinations (stomp). Local is "/queue/NAME" or "/topic/PATTERN"; a
// pattern ending in ".>" maps the rest of the name on to Remote's ".>".
type BridgeMap struct {
	Local  string `toml:"local" json:"local"`
	Remote string `toml:"remote" json:"remote"`
	// Direction of this map: "out", "in" or "both"; default the bridge's.
	Direction string `toml:"direction" json:"direction"`
}

// Bounds of the [[bridge]] keys.
const (
	bridgeMaxInFlight = 10000
	bridgeMaxHold     = 4 << 30
	bridgeMaxHops     = 64
	bridgeMaxMaps     = 1000
	bridgeMaxBridges  = 100
)

// BridgeDefaults fills the zero fields of b with their defaults.
func BridgeDefaults(b BridgeConfig) BridgeConfig {
	if b.Direction == "" {
		b.Direction = "both"
	}
	if b.MaxInFlight == 0 {
		b.MaxInFlight = 64
	}
	if b.MaxHops == 0 {
		b.MaxHops = 4
	}
	if b.MaxHoldBytes == 0 {
		b.MaxHoldBytes = 64 << 20
	}
	if b.Replicas == 0 {
		b.Replicas = 1
	}
	if b.ReconnectMin.Duration == 0 {
		b.ReconnectMin.Duration = 100 * time.Millisecond
	}
	if b.ReconnectMax.Duration == 0 {
		b.ReconnectMax.Duration = 30 * time.Second
	}
	if b.AckTimeout.Duration == 0 {
		b.AckTimeout.Duration = 10 * time.Second
	}
	if b.LogInterval.Duration == 0 {
		b.LogInterval.Duration = time.Minute
	}
	for i := range b.Map {
		if b.Map[i].Direction == "" {
			b.Map[i].Direction = b.Direction
		}
	}
	return b
}

// BridgeLocalLimits are the frame limits a bridge reads this appliance's
// MESSAGEs with (and a STOMP peer's, whose messages it sends here): the
// listener's (stomp.max_body_bytes, max_headers, max_header_bytes,
// max_header_line), with room for the headers a MESSAGE carries beyond
// those of the SEND (subscription, message-id, ack, delivery-count,
// timestamp...). A message this appliance accepted must never be too large
// for its own bridge: it would break the bridge's connection at every
// delivery and go to the dead-letter queue without ever going out.
func BridgeLocalLimits(c *Config) stomp.Limits {
	return stomp.Limits{
		MaxHeaderBytes: c.Stomp.MaxHeaderBytes + 16<<10,
		MaxHeaders:     c.Stomp.MaxHeaders + 32,
		MaxHeaderLine:  c.Stomp.MaxHeaderLine,
		MaxBody:        c.Stomp.MaxBodyBytes,
	}
}

// BridgeInHeaderOK reports whether a message a bridge brings in (from
// NATS, or a STOMP peer) may carry header key with value into its local
// SEND: the headers that steer a queue message (expires, delay,
// AMQ_SCHEDULED_DELAY) must have a value newMessage accepts, or the SEND
// fails the bridge's connection, again at every attempt. A bridge drops
// such a header instead (and counts it).
func BridgeInHeaderOK(key, value string) bool {
	switch key {
	case "expires":
		if value == "" || value == "0" {
			return true
		}
		n, err := strconv.ParseInt(value, 10, 64)
		return err == nil && n >= 0
	case "delay", "AMQ_SCHEDULED_DELAY":
		if value == "" {
			return true
		}
		n, err := strconv.ParseInt(value, 10, 64)
		return err == nil && n >= 0 && n <= maxDelayMs
	}
	return true
}

// BridgeTempReplyTo reports whether a reply-to value names a temporary
// queue: /temp-queue/NAME, as a client sets it, or /queue/#tmp.SESSION.NAME,
// what Herald rewrites that to on SEND. Either names a queue private to one
// connection of the broker the message was sent to: across a bridge it
// reaches nobody (a SEND here would make /temp-queue/NAME a temporary queue
// of the bridge's own connection, and /queue/#tmp.SESSION.NAME is, here or
// at a Herald peer, a queue of whichever local connection has that session
// number). A bridge drops such a reply-to, both ways.
func BridgeTempReplyTo(value string) bool {
	return strings.HasPrefix(value, prefixTempQueue) || strings.HasPrefix(value, prefixQueue+tempPrefix)
}

// validBridgeName: letters, digits, '-' and '_' (it names a consumer).
func validBridgeName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (c *Config) validateBridges() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Bridges) > bridgeMaxBridges {
		bad("bridge: %d bridges: at most %d", len(c.Bridges), bridgeMaxBridges)
	}
	names := map[string]bool{}
	outStreams := map[string]BridgeConfig{} // JetStream stream (with its servers) -> the bridge sending out into it
	for i, raw := range c.Bridges {
		b := BridgeDefaults(raw)
		where := fmt.Sprintf("bridge[%d]", i)
		if b.Kind == "jetstream" && b.Stream != "" {
			out := false
			for _, m := range b.Map {
				out = out || m.Direction == "out" || m.Direction == "both"
			}
			key := b.Stream + " " + strings.Join(b.URLs, ",")
			if other, ok := outStreams[key]; ok && out && (other.MaxInFlight > 1 || b.MaxInFlight > 1) {
				bad("%s: bridges %q and %q both send out into stream %s: a bridge keeps order with max_in_flight above 1 only in a stream it writes alone (docs/scale-out.md); give each its own stream, or set max_in_flight = 1 on both", where, other.Name, b.Name, b.Stream)
			} else if out {
				outStreams[key] = b
			}
		}
		if !validBridgeName(b.Name) {
			bad("%s.name: %q: want 1 to 64 letters, digits, '-' or '_' (example: \"backbone\")", where, b.Name)
		} else if names[b.Name] {
			bad("%s.name: %q used twice", where, b.Name)
		}
		names[b.Name] = true
		if b.ApplianceID != "" && !validBridgeName(b.ApplianceID) {
			bad("%s.appliance_id: %q: want 1 to 64 letters, digits, '-' or '_'", where, b.ApplianceID)
		}
		switch b.Kind {
		case "jetstream":
			if len(b.URLs) == 0 {
				bad("%s.urls: list the NATS servers (example: [\"nats://10.0.0.1:4222\"])", where)
			}
			for _, u := range b.URLs {
				if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
					bad("%s.urls: %q: want nats://HOST:PORT or tls://HOST:PORT", where, u)
				}
			}
			if b.Stream == "" || strings.ContainsAny(b.Stream, " .*>\t") {
				bad("%s.stream: %q: name the JetStream stream (no spaces, dots or wildcards; example: \"HERALD\")", where, b.Stream)
			}
			if b.Host != "" {
				bad("%s.host: for kind \"stomp\"; a jetstream bridge takes urls", where)
			}
			if b.Replicas < 1 || b.Replicas > 5 {
				bad("%s.replicas: %d: want 1 to 5", where, b.Replicas)
			}
			for _, sub := range b.StreamSubjects {
				if sub == "" || strings.ContainsAny(sub, " \t\r\n") || !natsSubjectTokens(sub) {
					bad("%s.stream_subjects: %q: not a NATS subject (no spaces, no empty token: no leading or trailing '.', no \"..\")", where, sub)
				}
			}
			// Direction in: the consumer redelivers a message whose
			// acknowledgement was lost after its ack wait (3 x
			// ack_timeout, at least 1s); the local queue's dedup window
			// must still hold its dedup-id then, or it is stored twice.
			in := false
			for _, m := range b.Map {
				in = in || m.Direction == "in" || m.Direction == "both"
			}
			if wait := max(time.Second, 3*b.AckTimeout.Duration); in && c.Queues.DedupWindow.Duration <= wait {
				bad("%s.ack_timeout: %s: direction in's consumer redelivers after 3 x ack_timeout (%s), which must be shorter than queues.dedup_window (%s), or a message whose acknowledgement was lost is stored twice: lower ack_timeout or raise queues.dedup_window", where, b.AckTimeout, wait, c.Queues.DedupWindow)
			}
		case "stomp":
			if b.Host == "" {
				bad("%s.host: name the STOMP peer (example: \"site-b.example:61613\")", where)
			}
			if len(b.URLs) > 0 || b.Stream != "" || b.CreateStream || len(b.StreamSubjects) > 0 || b.Token != "" || b.CredsFile != "" {
				bad("%s: urls, stream, create_stream, stream_subjects, token and creds_file are for kind \"jetstream\"", where)
			}
		default:
			bad("%s.kind: %q: want \"jetstream\" or \"stomp\"", where, b.Kind)
		}
		creds := 0
		if b.User != "" || b.Password != "" {
			creds++
		}
		if b.Token != "" {
			creds++
		}
		if b.CredsFile != "" {
			creds++
		}
		if creds > 1 {
			bad("%s: set one of user/password, token or creds_file", where)
		}
		if (b.TLSCert == "") != (b.TLSKey == "") {
			bad("%s: tls_cert and tls_key go together", where)
		}
		if !b.TLS && (b.TLSCA != "" || b.TLSCert != "") {
			bad("%s: tls_ca, tls_cert and tls_key need tls = true", where)
		}
		if (b.LocalLogin == "") != (b.LocalPasscode == "") {
			bad("%s: local_login and local_passcode go together", where)
		}
		dirOK := func(d string) bool { return d == "out" || d == "in" || d == "both" }
		if !dirOK(b.Direction) {
			bad("%s.direction: %q: want \"out\", \"in\" or \"both\"", where, b.Direction)
		}
		if b.MaxInFlight < 1 || b.MaxInFlight > bridgeMaxInFlight {
			bad("%s.max_in_flight: %d: want 1 to %d", where, b.MaxInFlight, bridgeMaxInFlight)
		}
		if b.MaxHoldBytes < 1024 || b.MaxHoldBytes > bridgeMaxHold {
			bad("%s.max_hold_bytes: %d: want 1024 to %d (4 GiB)", where, b.MaxHoldBytes, int64(bridgeMaxHold))
		}
		if b.MaxHops < 1 || b.MaxHops > bridgeMaxHops {
			bad("%s.max_hops: %d: want 1 to %d", where, b.MaxHops, bridgeMaxHops)
		}
		if b.ReconnectMin.Duration < time.Millisecond || b.ReconnectMax.Duration < b.ReconnectMin.Duration || b.ReconnectMax.Duration > time.Hour {
			bad("%s.reconnect_min, reconnect_max: %s, %s: want 1ms <= reconnect_min <= reconnect_max <= 1h", where, b.ReconnectMin, b.ReconnectMax)
		}
		if b.AckTimeout.Duration < 10*time.Millisecond || b.AckTimeout.Duration > time.Hour {
			bad("%s.ack_timeout: %s: want 10ms to 1h", where, b.AckTimeout)
		}
		if b.LogInterval.Duration < time.Second {
			bad("%s.log_interval: %s: want at least 1s", where, b.LogInterval)
		}
		if len(b.Map) == 0 {
			bad("%s.map: list at least one [[bridge.map]] with local and remote (example: local = \"/queue/orders\", remote = \"orders\")", where)
		}
		if len(b.Map) > bridgeMaxMaps {
			bad("%s.map: %d entries: at most %d", where, len(b.Map), bridgeMaxMaps)
		}
		for j, m := range b.Map {
			mw := fmt.Sprintf("%s.map[%d]", where, j)
			if !dirOK(m.Direction) {
				bad("%s.direction: %q: want \"out\", \"in\" or \"both\"", mw, m.Direction)
			} else if b.Direction != "both" && m.Direction != b.Direction {
				bad("%s.direction: %q, but the bridge's direction is %q", mw, m.Direction, b.Direction)
			}
			if err := CheckBridgeMap(b.Kind, m); err != nil {
				bad("%s: %v", mw, err)
			}
		}
	}
	return errs
}

// natsSubjectTokens reports whether the dot-separated tokens of a NATS
// subject (or pattern) are all non-empty.
func natsSubjectTokens(s string) bool {
	for _, t := range strings.Split(s, ".") {
		if t == "" {
			return false
		}
	}
	return true
}

// CheckBridgeMap checks one map entry: the local destination kind and the
// wildcard on both sides.
func CheckBridgeMap(kind string, m BridgeMap) error {
	var name string
	switch {
	case strings.HasPrefix(m.Local, prefixQueue):
		name = m.Local[len(prefixQueue):]
		if strings.ContainsAny(name, "*>") && m.Direction != "in" {
			return fmt.Errorf("local %q: a queue is consumed by its exact name: wildcards on queues only for direction \"in\"", m.Local)
		}
		if m.Direction == "both" {
			return fmt.Errorf("local %q: a queue both ways would be consumed by the bridge that fills it: map out and in to different queues (two maps with direction \"out\" and \"in\")", m.Local)
		}
	case strings.HasPrefix(m.Local, prefixTopic):
		name = m.Local[len(prefixTopic):]
	default:
		return fmt.Errorf("local %q: want /queue/NAME or /topic/NAME", m.Local)
	}
	if name == "" || m.Remote == "" {
		return fmt.Errorf("local and remote must both be set (example: local = \"/queue/orders.>\", remote = \"orders.>\")")
	}
	if strings.Contains(name, "*") || strings.Contains(m.Remote, "*") {
		return fmt.Errorf("'*' is not supported in maps: use an exact name or one ending in \".>\"")
	}
	lw, rw := strings.HasSuffix(name, ">"), strings.HasSuffix(m.Remote, ">")
	if lw != rw {
		return fmt.Errorf("local %q and remote %q: both or neither end in \">\"", m.Local, m.Remote)
	}
	if lw && (name != ">" && !strings.HasSuffix(name, ".>") || m.Remote != ">" && !strings.HasSuffix(m.Remote, ".>")) {
		return fmt.Errorf("'>' only as the last dot segment (example: \"orders.>\")")
	}
	if strings.Count(name, ">") > 1 || strings.Count(m.Remote, ">") > 1 {
		return fmt.Errorf("'>' only as the last dot segment")
	}
	if kind == "jetstream" && strings.ContainsAny(m.Remote, " \t\r\n/") {
		return fmt.Errorf("remote %q: a NATS subject has no spaces or '/' (example: \"orders.>\")", m.Remote)
	}
	if kind == "jetstream" && !natsSubjectTokens(m.Remote) {
		return fmt.Errorf("remote %q: a NATS subject has no empty token: no leading or trailing '.', no \"..\" (example: \"sites.a.orders\")", m.Remote)
	}
	if kind == "stomp" && !strings.HasPrefix(m.Remote, "/") {
		return fmt.Errorf("remote %q: want a STOMP destination (example: \"/queue/orders\")", m.Remote)
	}
	return nil
}
