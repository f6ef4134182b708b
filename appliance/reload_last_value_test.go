package appliance_test

import (
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// topic_last_values_evicted_total (herald_topic_last_values_evicted_total)
// counts last values dropped to stay within topics.last_value_max_bytes
// (docs/admin-api.md): a reload lowering the bound drops them for that
// reason, and they are counted (they were not).
func TestReload_LastValueTrimCounted(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Topics.LastValue = true })
	for _, name := range []string{"lv.a", "lv.b", "lv.c"} {
		tb.B.PublishForTest(name, []byte("value"))
	}
	before := tb.B.Stats()
	if before.LastValueBytes == 0 {
		t.Fatal("no last value kept")
	}
	cfg := *tb.B.Config()
	cfg.Topics.LastValueMaxBytes = 1 // below any one value: all go
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	after := tb.B.Stats()
	if after.LastValueBytes != 0 {
		t.Fatalf("last value bytes after the reload: %d, want 0", after.LastValueBytes)
	}
	if got := after.LastValueEvicted - before.LastValueEvicted; got != 3 {
		t.Errorf("topic_last_values_evicted_total rose by %d when a reload of last_value_max_bytes dropped 3 last values (%d bytes), want 3", got, before.LastValueBytes)
	}
}
