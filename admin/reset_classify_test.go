package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// A cursor reset whose journal commit timed out or failed is not the
// caller's mistake: 504 or 500 (CLI exit 75 or 1), as the docs say. Every
// error but a missing stream, cursor or active consumer was answered 400
// (exit 64, "give to=first..."). A bad target stays 400.
func TestResetCursor_ErrorClasses(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("reset cursor c of stream s: %w; retry", context.DeadlineExceeded), http.StatusGatewayTimeout},
		{errors.New("journal: disk I/O error"), http.StatusInternalServerError},
		{fmt.Errorf("%w: offset 9 is past the stream's next offset 3", appliance.ErrCursorTarget), http.StatusBadRequest},
		{fmt.Errorf("%w \"x\": want first, last, next or an offset", appliance.ErrCursorTarget), http.StatusBadRequest},
		{fmt.Errorf("%w \"c\" of stream s", appliance.ErrNoCursor), http.StatusNotFound},
		{fmt.Errorf("%w: c of stream s", appliance.ErrCursorActive), http.StatusConflict},
	}
	for _, c := range cases {
		if got := classify(classifyReset(c.err)).status; got != c.want {
			t.Errorf("%v: status %d, want %d", c.err, got, c.want)
		}
	}
}
