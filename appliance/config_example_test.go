package appliance_test

import (
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// examples/local.toml, the config README's "Try it" runs, decodes,
// validates and keeps everything under ./herald-data on loopback (nothing
// root-owned in /var/lib or /run).
func TestExampleConfig_Local(t *testing.T) {
	cfg, err := appliance.LoadConfig("../examples/local.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "./herald-data" || cfg.Admin.Socket != "./herald-data/admin.sock" || cfg.Stomp.Listen != "127.0.0.1:61613" {
		t.Fatalf("got data_dir %q, admin.socket %q, stomp.listen %q; want everything local", cfg.DataDir, cfg.Admin.Socket, cfg.Stomp.Listen)
	}
	if len(cfg.Multicast.Channels) != 0 {
		t.Fatalf("got %d multicast channels, want none for a local run", len(cfg.Multicast.Channels))
	}
}
