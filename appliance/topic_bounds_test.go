package appliance_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

func topicHeapAfterGC() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestTopic_IdleTopicsForgotten publishes to 100k distinct topic names and
// leaves them idle past topics.idle_forget: the broker's sweeper forgets
// them and their memory, but not a topic with a subscriber.
func TestTopic_IdleTopicsForgotten(t *testing.T) {
	const idle, n = 3 * time.Second, 100_000
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Topics.IdleForget = appliance.Duration{Duration: idle} })
	c := tb.Dial(t)
	if _, err := c.SubscribeReceipt(ctxT(t), "/topic/kept", "auto"); err != nil {
		t.Fatal(err)
	}
	h0 := topicHeapAfterGC()
	start := time.Now()
	for i := range n {
		tb.B.PublishForTest(fmt.Sprintf("idle.topic.%07d", i), []byte("x"))
	}
	tb.B.PublishForTest("kept", []byte("x"))
	if elapsed := time.Since(start); elapsed < idle/2 {
		// Nothing can have been idle long enough yet.
		if _, total := tb.B.TopicsPage(1); total != n+1 {
			t.Fatalf("after publishing: got %d topics, want %d", total, n+1)
		}
	} else {
		t.Logf("publishing took %s: not checking the count before the sweep", elapsed)
	}
	h1 := topicHeapAfterGC()
	waitFor(t, idle*5, "idle topics forgotten", func() bool {
		_, total := tb.B.TopicsPage(1)
		return total == 1
	})
	ts, total := tb.B.TopicsPage(10)
	if total != 1 || len(ts) != 1 || ts[0].Name != "kept" || ts[0].Subscribers != 1 {
		t.Fatalf("after the idle time: got %+v (total %d), want only kept with its subscriber", ts, total)
	}
	if got := tb.B.Stats().TopicsForgotten; got != n {
		t.Errorf("topics_forgotten_total: got %d, want %d", got, n)
	}
	h2 := topicHeapAfterGC()
	t.Logf("heap: %d before, +%d with %d topics, +%d once forgotten", h0, h1-h0, n, h2-h0)
	if grown := h2 - h0; grown > 4<<20 {
		t.Errorf("heap after forgetting grew by %d bytes, want at most %d", grown, 4<<20)
	}
	// A forgotten topic that comes back starts again.
	tb.B.PublishForTest("idle.topic.0000001", []byte("x"))
	if ts, total := tb.B.TopicsPage(10); total != 2 || ts[0].Name != "idle.topic.0000001" || ts[0].In != 1 {
		t.Errorf("topic back after being forgotten: got %+v (total %d), want it with in_total 1", ts, total)
	}
}

// TestTopic_LastValuesBoundedInBytes keeps last values within
// topics.last_value_max_bytes, dropping the least recently updated first
// and never keeping a single value above the bound; a new subscriber gets
// only the kept ones.
func TestTopic_LastValuesBoundedInBytes(t *testing.T) {
	const body = 4 << 10
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.LastValue = true
		c.Topics.LastValueMaxBytes = 3*body + 3000 // three values with their overhead
	})
	p := tb.Dial(t)
	send := func(topic string, size int) {
		t.Helper()
		if _, err := p.SendReceipt(ctxT(t), "/topic/"+topic, []byte(topic+strings.Repeat("x", size-len(topic)))); err != nil {
			t.Fatalf("send %s: %v", topic, err)
		}
	}
	for i := range 5 {
		send(fmt.Sprintf("lv.%d", i), body) // lv.0 and lv.1 evicted
	}
	send("lv.5", 4*body) // alone above the bound: not kept
	send("lv.2", body)   // updated: now the most recent
	send("lv.6", body)   // evicts lv.3, the least recently updated
	st := tb.B.Stats()
	if st.LastValueEvicted != 4 {
		t.Errorf("topic_last_values_evicted_total: got %d, want 4 (lv.0, lv.1, lv.5, lv.3)", st.LastValueEvicted)
	}
	if st.LastValueBytes <= 3*body || st.LastValueBytes > 3*body+3000 {
		t.Errorf("topic_last_value_bytes: got %d, want three values' worth (%d to %d)", st.LastValueBytes, 3*body+1, 3*body+3000)
	}
	c := tb.Dial(t)
	sub, _ := c.SubscribeReceipt(ctxT(t), "/topic/lv.*", "auto")
	got := map[string]bool{}
	for range 3 {
		m := recv(t, sub)
		got[strings.TrimRight(string(m.Body), "x")] = true
	}
	expectNone(t, sub, 200*time.Millisecond)
	if !got["lv.2"] || !got["lv.4"] || !got["lv.6"] {
		t.Errorf("new subscriber: got the last values of %v, want lv.2, lv.4, lv.6", got)
	}
}

// TestTopic_ListingCapped lists the first topics by name with the total.
func TestTopic_ListingCapped(t *testing.T) {
	tb := mustStartBroker(t, nil)
	for i := range 30 {
		tb.B.PublishForTest(fmt.Sprintf("cap.%02d", i), []byte("x"))
	}
	c := tb.Dial(t)
	c.SubscribeReceipt(ctxT(t), "/topic/cap.*", "auto")
	c.SubscribeReceipt(ctxT(t), "/topic/cap.05", "auto")
	c.SubscribeReceipt(ctxT(t), "/topic/aaa", "auto")
	ts, total := tb.B.TopicsPage(7)
	if total != 32 {
		t.Errorf("total: got %d, want 32 (30 topics, a pattern, a subscribed topic)", total)
	}
	var names []string
	for _, v := range ts {
		names = append(names, v.Name)
	}
	if want := "aaa cap.* cap.00 cap.01 cap.02 cap.03 cap.04"; strings.Join(names, " ") != want {
		t.Errorf("first 7: got %v, want %s", names, want)
	}
	ts, _ = tb.B.TopicsPage(100)
	if len(ts) != 32 || ts[7].Name != "cap.05" || ts[7].Subscribers != 1 || ts[7].In != 1 || ts[1].Subscribers != 1 {
		t.Errorf("whole list: got %+v, want 32 with cap.05 subscribed once and published once", ts)
	}
	if all := tb.B.Topics(); len(all) != len(ts) {
		t.Errorf("Topics: got %d, want %d as TopicsPage", len(all), len(ts))
	}
}

// TestConfig_TopicBounds validates topics.idle_forget and
// topics.last_value_max_bytes, and decodes them from TOML.
func TestConfig_TopicBounds(t *testing.T) {
	cfg := appliance.DefaultConfig()
	if cfg.Topics.IdleForget.Duration != 10*time.Minute || cfg.Topics.LastValueMaxBytes != 64<<20 {
		t.Errorf("defaults: got idle_forget %s, last_value_max_bytes %d; want 10m, %d", cfg.Topics.IdleForget, cfg.Topics.LastValueMaxBytes, 64<<20)
	}
	cfg.Topics.IdleForget = appliance.Duration{}
	cfg.Topics.LastValueMaxBytes = -1
	err := cfg.Validate()
	for _, want := range []string{"topics.idle_forget", "topics.last_value_max_bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: got %v, want it to name %s", err, want)
		}
	}
	cfg = appliance.DefaultConfig()
	if err := appliance.DecodeConfig("[topics]\nidle_forget = \"30s\"\nlast_value_max_bytes = 1000\n", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Topics.IdleForget.Duration != 30*time.Second || cfg.Topics.LastValueMaxBytes != 1000 {
		t.Errorf("decoded: got idle_forget %s, last_value_max_bytes %d; want 30s, 1000", cfg.Topics.IdleForget, cfg.Topics.LastValueMaxBytes)
	}
}
