package appliance_test

import "testing"

// A kv-history MESSAGE carries what a kv-get of the same revision does,
// kv-expires included (it was lost: kv_history had no expiry column).
func TestKV_HistoryCarriesExpires(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	kvPut(t, c, "/kv/p.site1", "up", hdr("kv-ttl", "1h"), hdr("content-type", "text/plain"))
	get, err := c.SubscribeReceipt(ctxT(t), "/kv/p.site1", "auto", hdr("kv-get", "true"))
	if err != nil {
		t.Fatal(err)
	}
	g := recv(t, get)
	h, err := c.SubscribeReceipt(ctxT(t), "/kv/p.site1", "auto", hdr("kv-history", "true"))
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, h)
	if g.Get("kv-expires") == "" {
		t.Fatalf("kv-get has no kv-expires: %v", g.Headers)
	}
	for _, k := range []string{"kv-expires", "revision", "content-type", "kv-operation"} {
		if m.Get(k) != g.Get(k) {
			t.Errorf("kv-history MESSAGE %s=%q, kv-get has %q (history %v)", k, m.Get(k), g.Get(k), m.Headers)
		}
	}
}
