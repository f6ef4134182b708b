package main

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/multicast"
)

// channel is one configured multicast channel: an appliance.TopicSink that
// publishes every message of its topics through a multicast.Sender.
type channel struct {
	cfg    appliance.ChannelConfig
	sender *multicast.Sender
}

var (
	_ appliance.TopicSink        = (*channel)(nil)
	_ appliance.TopicSinkChecker = (*channel)(nil)
	_ appliance.TopicSinkBatcher = (*channel)(nil)
	_ appliance.StreamSink       = (*channel)(nil)
	_ appliance.KVSink           = (*channel)(nil)
)

func (c *channel) Name() string { return c.cfg.Name }

func (c *channel) Matches(topic string) bool {
	for _, p := range c.cfg.Topics {
		if appliance.MatchTopic(p, topic) {
			return true
		}
	}
	return false
}

// MatchesStream reports whether the channel carries stream name (its
// streams patterns): appliance.StreamSink.
func (c *channel) MatchesStream(name string) bool {
	for _, p := range c.cfg.Streams {
		if appliance.MatchTopic(p, name) {
			return true
		}
	}
	return false
}

// MatchesKVBucket reports whether the channel carries the key-value bucket
// (its kv list, "*" for all): appliance.KVSink.
func (c *channel) MatchesKVBucket(bucket string) bool {
	for _, p := range c.cfg.KV {
		if p == "*" || p == ">" || p == bucket {
			return true
		}
	}
	return false
}

// Check refuses a message larger than the protocol carries (multicast.MaxMessage,
// what a receiver reassembles from fragments): the publisher gets an ERROR rather
// than a message silently missing on the LAN. Anything smaller goes, as fragments
// when it does not fit one datagram.
func (c *channel) Check(topic string, headers stomp.Headers, body []byte) error {
	n := 2 + len(body)
	for _, h := range headers {
		n += 4 + len(h.Key) + len(h.Value)
	}
	if max := c.sender.MaxMessageSize(); n > max {
		return fmt.Errorf("a %d-byte message (headers and body) on %s is larger than multicast channel %q carries (at most %d bytes, reassembled from fragments by receivers); nothing was sent: send it to a queue or to a topic outside the channel's patterns %v, or make it smaller",
			n, topic, c.cfg.Name, max, c.cfg.Topics)
	}
	return nil
}

func (c *channel) Publish(topic string, headers stomp.Headers, body []byte) error {
	return c.sender.Publish(topic, mcastHeaders(headers), body)
}

// PublishFrom and Flush: a publisher with its next SEND already read gets both
// into one datagram (appliance.TopicSinkBatcher).
func (c *channel) PublishFrom(now time.Time, topic string, headers stomp.Headers, body []byte, more bool) error {
	return c.sender.PublishAt(now, topic, mcastHeaders(headers), body, more)
}

func (c *channel) Flush() { c.sender.Flush() }

// The two header types are the same struct (the conversion below does not
// compile otherwise), so a SEND's headers are passed as they are: Publish
// encodes them at once and keeps nothing of the slice. Every topic message
// came here, and the copy was an allocation per message.
var _ = multicast.Header(stomp.Header{})

func mcastHeaders(h stomp.Headers) []multicast.Header {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*multicast.Header)(unsafe.Pointer(unsafe.SliceData(h))), len(h))
}

// loneInline is a channel's lone_inline: "on", "off", or "" as its profile says (on for
// low-latency, the default profile; off for dashboard).
func loneInline(cc appliance.ChannelConfig) bool {
	return cc.LoneInline == "on" || cc.LoneInline == "" && multicast.Profile(cc.Profile).LoneInline()
}

// openChannels starts a sender per configured channel and registers it with
// the broker.
func (d *daemon) openChannels(ctx context.Context) error {
	for _, cc := range d.cfg.Multicast.Channels {
		key, err := readChannelKey(cc) // preflight.go
		if err != nil {
			return fmt.Errorf("multicast channel %s: key_file %w", cc.Name, err)
		}
		var prev []byte
		if cc.PreviousKeyFile != "" {
			pc := cc
			pc.Key, pc.KeyFile = "", cc.PreviousKeyFile
			if prev, err = readChannelKey(pc); err != nil {
				return fmt.Errorf("multicast channel %s: previous_key_file %w", cc.Name, err)
			}
		}
		inline := loneInline(cc)
		s, err := multicast.NewSender(multicast.SenderConfig{
			Group:            cc.Group,
			Interface:        cc.Interface,
			TTL:              cc.TTL,
			Profile:          multicast.Profile(cc.Profile),
			RateLimit:        cc.RateLimit,
			RepairRate:       cc.RepairRate,
			SourceRepairRate: cc.SourceRepairRate,
			NAKSources:       cc.NAKSources,
			StreamIdle:       cc.StreamIdle.Duration,
			MaxStreams:       cc.MaxStreams,
			Window:           cc.Window,
			Key:              key,
			KeyID:            uint8(cc.KeyID),
			Seal:             cc.Seal,
			PrevKey:          prev,
			PrevKeyID:        uint8(cc.PreviousKeyID),
			LoneInline:       inline,
			Logger:           d.log.With("component", "multicast", "channel", cc.Name),
		})
		if err != nil {
			return fmt.Errorf("multicast channel %s: %w", cc.Name, err)
		}
		if err := s.Open(ctx); err != nil {
			return fmt.Errorf("multicast channel %s (group %s, interface %q): %w", cc.Name, cc.Group, cc.Interface, err)
		}
		ch := &channel{cfg: cc, sender: s}
		d.channels = append(d.channels, ch)
		d.broker.AddTopicSink(ch)
		d.log.Info("multicast channel open", "channel", cc.Name, "group", cc.Group, "interface", cc.Interface, "topics", cc.Topics, "streams", cc.Streams, "kv", cc.KV, "profile", cc.Profile, "lone_inline", inline, "session", multicast.FormatSession(s.Session()))
	}
	return nil
}

func (d *daemon) closeChannels() {
	for _, ch := range d.channels {
		if err := ch.sender.Close(); err != nil {
			d.log.Warn("multicast channel close", "channel", ch.cfg.Name, "err", err)
		}
	}
	d.channels = nil
}

// channelStats serves the channels' counters to the admin API.
type channelStats struct{ d *daemon }

var _ admin.ChannelStats = channelStats{}

func (c channelStats) Channels() []admin.ChannelView {
	out := make([]admin.ChannelView, 0, len(c.d.channels))
	for _, ch := range c.d.channels {
		st := ch.sender.Stats()
		profile := ch.cfg.Profile
		if profile == "" {
			profile = string(multicast.ProfileLowLatency)
		}
		srcs := make([]admin.NAKSourceView, len(st.TopSources))
		for i, s := range st.TopSources {
			srcs[i] = admin.NAKSourceView{Source: s.Source.String(), NAKs: s.NAKs, NAKsDropped: s.NAKsDropped,
				Refused: s.Refused, Repairs: s.Repairs, RepairBytes: s.RepairBytes}
		}
		out = append(out, admin.ChannelView{
			Name:           ch.cfg.Name,
			Group:          ch.cfg.Group,
			Interface:      ch.cfg.Interface,
			Profile:        profile,
			Topics:         ch.cfg.Topics,
			KV:             ch.cfg.KV,
			Session:        multicast.FormatSession(st.Session),
			Streams:        st.Streams,
			Messages:       st.Messages,
			Datagrams:      st.Datagrams,
			Bytes:          st.Bytes,
			Repairs:        st.Repairs,
			NAKs:           st.NAKs,
			NAKsDropped:    st.NAKsDropped,
			Losses:         st.Lost,
			RepairBytes:    st.RepairBytes,
			NAKSourceCount: st.NAKSources,
			NAKSources:     srcs,
			RateLimited:    st.RateLimited.Seconds(),
			WindowBytes:    int64(st.WindowBytes),
			// Fragments and late-join answers (issue 11, deliver 10 and 8).
			FragmentedMessages: st.Fragmented,
			Fragments:          st.Fragments,
			HistoryAnswers:     st.HistoryAnswers,
			HistoryRefused:     st.HistoryRefused,
			StreamsEvicted:     st.StreamsEvicted,
		})
	}
	return out
}
