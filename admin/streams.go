package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/herald-mq/herald/appliance"
)

// StreamBroker is what the stream endpoints need of the broker;
// *appliance.Broker implements it. A Broker without it answers the stream
// endpoints with 501.
type StreamBroker interface {
	// Streams lists the streams by name with their first and last times.
	Streams(ctx context.Context) []appliance.StreamView
	// Stream returns one stream; appliance.ErrNoStream if there is none.
	Stream(ctx context.Context, name string) (appliance.StreamView, error)
	// DeleteStream removes a stream, its messages and cursors;
	// appliance.ErrStreamBusy while it has subscribers.
	// A delete that outlasts ctx goes on: the count so far, with
	// appliance.ErrStillRunning.
	DeleteStream(ctx context.Context, name string) (int, error)
	// StreamDelete is the last delete of stream name since the broker
	// started (running, or how it ended); false when it knows none.
	StreamDelete(name string) (appliance.StreamDeleteView, bool)
	// ResetCursor moves a durable cursor to target (first, last, next or
	// an offset); appliance.ErrCursorActive while a consumer holds it.
	ResetCursor(ctx context.Context, name, cursor, target string) (old, pos uint64, err error)
}

var _ StreamBroker = (*appliance.Broker)(nil)

// StreamList is GET /v1/streams.
type StreamList struct {
	Streams []appliance.StreamView `json:"streams"`
}

// CursorList is GET /v1/streams/{name}/cursors.
type CursorList struct {
	Stream     string                       `json:"stream"`
	NextOffset uint64                       `json:"next_offset"`
	Cursors    []appliance.StreamCursorView `json:"cursors"`
}

// StreamOp is the answer of DELETE /v1/streams/{name}.
type StreamOp struct {
	Stream  string `json:"stream"`
	Deleted int    `json:"deleted"` // messages removed
	// Running: the delete outlasted the request and goes on (202
	// Accepted); Deleted is what it removed so far. Its progress and end:
	// GET /v1/streams/{name}/delete.
	Running bool `json:"running,omitempty"`
}

// CursorReset is the answer of POST /v1/streams/{name}/cursors/{cursor}/reset.
type CursorReset struct {
	Stream   string `json:"stream"`
	Cursor   string `json:"cursor"`
	Previous uint64 `json:"previous_offset"`
	Offset   uint64 `json:"next_offset"` // where its next consumer resumes
}

func (s *Server) streamRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/streams", s.streams)
	mux.HandleFunc("GET /v1/streams/{name}", s.stream)
	mux.HandleFunc("GET /v1/streams/{name}/cursors", s.streamCursors)
	mux.HandleFunc("DELETE /v1/streams/{name}", s.deleteStream)
	mux.HandleFunc("GET /v1/streams/{name}/delete", s.streamDelete)
	mux.HandleFunc("POST /v1/streams/{name}/cursors/{cursor}/reset", s.resetCursor)
}

func (s *Server) streamBroker(w http.ResponseWriter) StreamBroker {
	sb, ok := s.o.Broker.(StreamBroker)
	if !ok {
		writeError(w, errorf(http.StatusNotImplemented, "this daemon has no streams", "streams are not supported"))
	}
	return sb
}

// classifyStream maps the stream errors to answers.
func classifyStream(err error) error {
	switch {
	case errors.Is(err, appliance.ErrNoStream):
		return errorf(http.StatusNotFound, "list the streams with: herald streams", err.Error())
	case errors.Is(err, appliance.ErrNoCursor):
		return errorf(http.StatusNotFound, "list the cursors with: herald stream cursors NAME", err.Error())
	case errors.Is(err, appliance.ErrStreamBusy), errors.Is(err, appliance.ErrCursorActive):
		return errorf(http.StatusConflict, "close its subscribers first: herald connections, then herald connections close ID", err.Error())
	case errors.Is(err, appliance.ErrStreamDeleting):
		return errorf(http.StatusConflict, "wait for the running delete, then retry", err.Error())
	case errors.Is(err, appliance.ErrStillRunning):
		return errorf(http.StatusGatewayTimeout, "the delete outlasted heraldd's operation timeout and goes on: GET /v1/streams/NAME/delete shows its progress and end", err.Error())
	}
	return err
}

func (s *Server) streams(w http.ResponseWriter, r *http.Request) {
	sb := s.streamBroker(w)
	if sb == nil {
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	l := sb.Streams(ctx)
	if l == nil {
		l = []appliance.StreamView{}
	}
	writeJSON(w, http.StatusOK, StreamList{Streams: l})
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	sb := s.streamBroker(w)
	if sb == nil {
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	v, err := sb.Stream(ctx, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, classifyStream(err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) streamCursors(w http.ResponseWriter, r *http.Request) {
	sb := s.streamBroker(w)
	if sb == nil {
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	v, err := sb.Stream(ctx, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, classifyStream(err))
		return
	}
	writeJSON(w, http.StatusOK, CursorList{Stream: v.Name, NextOffset: v.NextOffset, Cursors: v.Cursors})
}

func (s *Server) deleteStream(w http.ResponseWriter, r *http.Request) {
	sb := s.streamBroker(w)
	if sb == nil {
		return
	}
	name := r.PathValue("name")
	ctx, cancel := s.opContext(r)
	defer cancel()
	n, err := sb.DeleteStream(ctx, name)
	if stillRunning(r, err) {
		s.audit(r, "admin: stream delete goes on past the request", "stream", name, "messages_so_far", n)
		writeJSON(w, http.StatusAccepted, StreamOp{Stream: name, Deleted: n, Running: true})
		return
	}
	if err != nil {
		s.fail(w, r, classifyStream(err))
		return
	}
	s.audit(r, "admin: stream deleted", "stream", name, "messages", n)
	writeJSON(w, http.StatusOK, StreamOp{Stream: name, Deleted: n})
}

func (s *Server) streamDelete(w http.ResponseWriter, r *http.Request) {
	sb := s.streamBroker(w)
	if sb == nil {
		return
	}
	name := r.PathValue("name")
	v, ok := sb.StreamDelete(name)
	if !ok {
		hint := fmt.Sprintf("heraldd keeps the last delete of each stream name since it started, of at most %d names (the delete that ended first is forgotten first), and a delete stops at its shutdown: list the streams with: herald streams", appliance.MaxStreamDeleteRecords)
		writeError(w, errorf(http.StatusNotFound, hint, fmt.Sprintf("no delete of stream %q known", strings.TrimPrefix(name, "/stream/"))))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) resetCursor(w http.ResponseWriter, r *http.Request) {
	sb := s.streamBroker(w)
	if sb == nil {
		return
	}
	name, cursor := r.PathValue("name"), r.PathValue("cursor")
	to := r.URL.Query().Get("to")
	if to == "" {
		writeError(w, errorf(http.StatusBadRequest, "give to=first, to=last, to=next or to=OFFSET", "no target offset"))
		return
	}
	if _, err := appliance.ParseCursorTarget(to, 0, 0); err != nil {
		writeError(w, errorf(http.StatusBadRequest, "give to=first, to=last, to=next or to=OFFSET", err.Error()))
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	old, pos, err := sb.ResetCursor(ctx, name, cursor, to)
	if err != nil {
		s.fail(w, r, classifyReset(err))
		return
	}
	s.audit(r, "admin: stream cursor reset", "stream", name, "cursor", cursor, "from", old, "to", pos)
	writeJSON(w, http.StatusOK, CursorReset{Stream: name, Cursor: cursor, Previous: old, Offset: pos})
}

// classifyReset maps a cursor reset's error: a bad target is the
// request's (400); the stream's own errors as for other stream requests;
// a journal that did not commit in time or failed is 504 or 500, not the
// caller's mistake.
func classifyReset(err error) error {
	if errors.Is(err, appliance.ErrCursorTarget) {
		return errorf(http.StatusBadRequest, "give to=first, to=last, to=next or an offset up to the stream's next offset (herald stream show NAME)", err.Error())
	}
	return classifyStream(err)
}

func spath(name, rest string) string { return "/v1/streams/" + url.PathEscape(name) + rest }

// Streams is GET /v1/streams.
func (c *Client) Streams(ctx context.Context) (*StreamList, error) {
	var v StreamList
	return &v, c.get(ctx, "GET", "/v1/streams", nil, &v)
}

// Stream is GET /v1/streams/{name}.
func (c *Client) Stream(ctx context.Context, name string) (*appliance.StreamView, error) {
	var v appliance.StreamView
	return &v, c.get(ctx, "GET", spath(name, ""), nil, &v)
}

// StreamCursors is GET /v1/streams/{name}/cursors.
func (c *Client) StreamCursors(ctx context.Context, name string) (*CursorList, error) {
	var v CursorList
	return &v, c.get(ctx, "GET", spath(name, "/cursors"), nil, &v)
}

// DeleteStream is DELETE /v1/streams/{name}. A delete that outlasts the
// daemon's operation timeout answers with Running: follow it with
// StreamDelete.
func (c *Client) DeleteStream(ctx context.Context, name string) (*StreamOp, error) {
	var v StreamOp
	return &v, c.get(ctx, "DELETE", spath(name, ""), nil, &v)
}

// StreamDelete is GET /v1/streams/{name}/delete: the last delete of the
// stream since the daemon started, running or ended.
func (c *Client) StreamDelete(ctx context.Context, name string) (*appliance.StreamDeleteView, error) {
	var v appliance.StreamDeleteView
	return &v, c.get(ctx, "GET", spath(name, "/delete"), nil, &v)
}

// ResetCursor is POST /v1/streams/{name}/cursors/{cursor}/reset?to=TARGET.
func (c *Client) ResetCursor(ctx context.Context, name, cursor, to string) (*CursorReset, error) {
	var v CursorReset
	return &v, c.get(ctx, "POST", spath(name, "/cursors/"+url.PathEscape(cursor)+"/reset?to="+url.QueryEscape(to)), nil, &v)
}
