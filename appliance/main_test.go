package appliance_test

import (
	"os"
	"testing"

	"github.com/herald-mq/herald/internal/lazyfs"
)

// TestMain: a run of this binary may be the child serving a lazyfs mount
// (ioerror_test.go, pagein_readerror_test.go).
func TestMain(m *testing.M) {
	lazyfs.ChildMain()
	os.Exit(m.Run())
}
