package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/herald-mq/herald/appliance"
)

// Sentinel errors.
var (
	// ErrSocketInUse is returned by Start when another daemon holds the
	// socket's lock file (SocketLockPath) or answers on the socket.
	ErrSocketInUse = errors.New("admin: the admin socket is taken by another daemon")
	// ErrNotSocket is returned by Start when the socket path is another kind
	// of file, which Start never removes.
	ErrNotSocket = errors.New("admin: the admin socket path exists and is not a socket")
)

// apiError is an error answer: an HTTP status, the error and what to do.
type apiError struct {
	status int
	msg    string
	hint   string
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, hint, msg string) *apiError {
	return &apiError{status: status, msg: msg, hint: hint}
}

// classify turns a broker or journal error into an answer.
func classify(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, appliance.ErrNoQueue):
		return errorf(http.StatusNotFound, "list the queues with: herald queues", err.Error())
	case errors.Is(err, appliance.ErrQueueBusy):
		return errorf(http.StatusConflict, "close its consumers first: herald connections, then herald connections close ID", err.Error())
	case errors.Is(err, appliance.ErrPurging):
		return errorf(http.StatusConflict, "a purge of the queue the error names is running: wait for its end (herald queue show on that queue shows it), then retry", err.Error())
	case errors.Is(err, appliance.ErrStillRunning):
		return errorf(http.StatusGatewayTimeout, "it outlasted heraldd's operation timeout and goes on (herald queue show NAME shows a purge's progress); retry once it ended", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusGatewayTimeout, "the journal is slow or stalled: check herald status (WAL size) and free disk space, then retry", err.Error())
	case errors.Is(err, context.Canceled):
		return errorf(499, "the request was cancelled", err.Error())
	}
	return errorf(http.StatusInternalServerError, "see the daemon's log (journalctl -u herald, the systemd unit) for details", err.Error())
}
