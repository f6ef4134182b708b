package appliance_test

import (
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// A lone SEND whose client waits for its RECEIPT is committed on the
// connection's reader goroutine (journal.Store.CommitNow) while the
// journal is idle; SENDs sent without waiting go through the writer.
func TestSend_LoneSendCommitsInline(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Journal.Sync = "full" })
	c := tb.Dial(t)
	before := tb.Store.Stats().Inline
	sendN(t, c, "/queue/inline", 50, "m")
	inline := tb.Store.Stats().Inline - before
	if inline < 40 {
		t.Fatalf("%d of 50 lone SENDs with receipts committed inline, want at least 40", inline)
	}
	sub, _ := c.Subscribe("/queue/inline", "auto")
	eq(t, bodies(t, sub, 50), seq("m", 0, 50))
}
