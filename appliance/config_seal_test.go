package appliance

import (
	"strings"
	"testing"
)

// Multicast sealing and key rotation settings are validated with errors naming the setting.
func TestValidate_MulticastSealAndRotation(t *testing.T) {
	base := ChannelConfig{Name: "m", Group: "239.255.0.1:7400", Topics: []string{"metrics.>"}, KeyFile: "/etc/herald/new.key", KeyID: 2}
	for _, tc := range []struct {
		name string
		edit func(*ChannelConfig)
		want string // "" = valid
	}{
		{"sealed with a key", func(c *ChannelConfig) { c.Seal = true }, ""},
		{"rotation", func(c *ChannelConfig) { c.Seal, c.PreviousKeyFile, c.PreviousKeyID = true, "/etc/herald/old.key", 1 }, ""},
		{"seal without a key", func(c *ChannelConfig) { c.Seal, c.KeyFile = true, "" }, "multicast.channel[0].seal"},
		{"previous key without a key", func(c *ChannelConfig) { c.KeyFile, c.PreviousKeyFile, c.PreviousKeyID = "", "/etc/herald/old.key", 1 }, "previous_key_file"},
		{"previous key with the same id", func(c *ChannelConfig) { c.PreviousKeyFile, c.PreviousKeyID = "/etc/herald/old.key", 2 }, "previous_key_id: 2 is also key_id"},
		{"previous key id out of range", func(c *ChannelConfig) { c.PreviousKeyFile, c.PreviousKeyID = "/etc/herald/old.key", 256 }, "previous_key_id: 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			ch := base
			tc.edit(&ch)
			c.Multicast.Channels = []ChannelConfig{ch}
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
