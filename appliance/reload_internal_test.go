package appliance

import (
	"reflect"
	"testing"
)

// TestReload_EveryKeyClassified fails for a config key that is neither
// reloadable nor restart-only: whoever adds a key to Config decides here
// (reloadKeys in reload.go) whether a SIGHUP applies it.
func TestReload_EveryKeyClassified(t *testing.T) {
	keys := configKeys()
	if len(keys) < 50 {
		t.Fatalf("configKeys found %d keys: the walk of Config is broken", len(keys))
	}
	for path := range keys {
		if _, ok := reloadKeys[path]; !ok {
			t.Errorf("config key %s is not classified in reloadKeys (reload.go): mark it reloadable (and apply it in Broker.Reload) or restartOnly", path)
		}
	}
	for path := range reloadKeys {
		if _, ok := keys[path]; !ok {
			t.Errorf("reloadKeys classifies %s, which is no key of Config", path)
		}
	}
}

// DiffConfig names each changed key once, in its class; mergeReloadable
// takes exactly the reloadable ones.
func TestReload_DiffAndMerge(t *testing.T) {
	old := DefaultConfig()
	new := old
	new.Stomp.MaxBodyBytes = 100
	new.Queues.Policies = []QueuePolicy{{Match: "a.>", MaxMessages: 5}}
	new.Journal.Sync = "normal"
	new.Multicast.Channels = []ChannelConfig{{Name: "x", Group: "239.1.1.1:1", Topics: []string{"t"}}}
	new.Log.Level = "debug"
	ch := DiffConfig(old, new)
	if want := []string{"log.level", "queues.policy", "stomp.max_body_bytes"}; !reflect.DeepEqual(ch.Reloaded, want) {
		t.Errorf("Reloaded: %v, want %v", ch.Reloaded, want)
	}
	if want := []string{"journal.sync", "multicast.channel"}; !reflect.DeepEqual(ch.Restart, want) {
		t.Errorf("Restart: %v, want %v", ch.Restart, want)
	}
	m := mergeReloadable(old, new)
	if m.Stomp.MaxBodyBytes != 100 || len(m.Queues.Policies) != 1 || m.Log.Level != "debug" {
		t.Errorf("merge lost a reloadable key: %+v %+v %+v", m.Stomp.MaxBodyBytes, m.Queues.Policies, m.Log.Level)
	}
	if m.Journal.Sync != old.Journal.Sync || len(m.Multicast.Channels) != 0 {
		t.Errorf("merge applied a restart-only key: sync %q, channels %v", m.Journal.Sync, m.Multicast.Channels)
	}
	if ch := DiffConfig(old, old); len(ch.Reloaded)+len(ch.Restart) != 0 {
		t.Errorf("DiffConfig of a config with itself: %+v", ch)
	}
}
