package appliance_test

import (
	"os"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// FuzzDecodeConfig: no config text may panic the strict decoder or
// Validate; whatever decodes must validate or fail with an error.
func FuzzDecodeConfig(f *testing.F) {
	// Seeds are the shipped config's sections, one each: whole-file seeds
	// (several KiB) slow the fuzzer to a crawl.
	if b, err := os.ReadFile("../packaging/herald.toml"); err == nil {
		for _, sec := range strings.Split(string(b), "\n[") {
			if len(sec) < 400 {
				f.Add("[" + sec)
			}
		}
	}
	f.Add("[stomp]\nlisten = \"127.0.0.1:1\"\nheartbeat_send = \"1s\"\n")
	f.Add("[[queues.policy]]\nmatch = \"a.>\"\nmax_messages = 5\n[[multicast.channel]]\nname = \"x\"\ngroup = \"239.1.1.1:1\"\ntopics = [\"t\"]\n")
	f.Add("[nope]\nkey = 1\n\"quoted key\" = 2\n")
	f.Fuzz(func(t *testing.T, src string) {
		cfg := appliance.DefaultConfig()
		if err := appliance.DecodeConfig(src, &cfg); err != nil {
			return
		}
		_ = cfg.Validate()
		cfg.Queues.For("any.queue")
	})
}
