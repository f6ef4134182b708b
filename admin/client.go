package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// Client calls the admin API over its unix socket. Its methods return
// *APIError for error answers and *ConnError when the socket cannot be
// reached.
type Client struct {
	Socket string
	hc     *http.Client
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{Socket: socket, hc: &http.Client{Transport: tr}}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// APIError is an error answer of the daemon.
type APIError struct {
	Status  int    // HTTP status
	Message string // "error"
	Hint    string // "hint": what to do
}

func (e *APIError) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + "; " + e.Hint
}

// ConnError is a failure to reach the daemon or to read its answer.
type ConnError struct {
	Socket string
	Err    error
}

func (e *ConnError) Error() string { return fmt.Sprintf("admin socket %s: %v", e.Socket, e.Err) }
func (e *ConnError) Unwrap() error { return e.Err }

// Do sends a request and returns the raw answer body of a 2xx answer;
// others become *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body any) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &ConnError{Socket: c.Socket, Err: err}
	}
	return b, nil
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://herald"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &ConnError{Socket: c.Socket, Err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
		}
		return nil, &APIError{Status: resp.StatusCode, Message: eb.Error, Hint: eb.Hint}
	}
	return resp, nil
}

func (c *Client) get(ctx context.Context, method, path string, body, out any) error {
	b, err := c.Do(ctx, method, path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &ConnError{Socket: c.Socket, Err: fmt.Errorf("bad answer to %s %s: %w", method, path, err)}
	}
	return nil
}

func qpath(name string, rest string) string { return "/v1/queues/" + url.PathEscape(name) + rest }

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var v Status
	return &v, c.get(ctx, "GET", "/v1/status", nil, &v)
}

// Ready is GET /v1/ready: nil when the daemon is ready.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.Do(ctx, "GET", "/v1/ready", nil)
	return err
}

// Queues is GET /v1/queues.
func (c *Client) Queues(ctx context.Context) (*QueueList, error) {
	var v QueueList
	return &v, c.get(ctx, "GET", "/v1/queues", nil, &v)
}

// Queue is GET /v1/queues/{name}.
func (c *Client) Queue(ctx context.Context, name string) (*appliance.QueueView, error) {
	var v appliance.QueueView
	return &v, c.get(ctx, "GET", qpath(name, ""), nil, &v)
}

// Peek is GET /v1/queues/{name}/messages?limit=N: bodies cut at the
// server's default (DefaultMaxBody).
func (c *Client) Peek(ctx context.Context, name string, limit int) (*Peek, error) {
	return c.PeekBody(ctx, name, limit, PeekOptions{MaxBody: -1})
}

// PeekOptions says how much of each body a peek returns.
type PeekOptions struct {
	MaxBody  int  // bytes of each body; -1: the server's default (DefaultMaxBody)
	FullBody bool // whole bodies up to MaxPeekBody; MaxBody must then be -1
}

// PeekBody is GET /v1/queues/{name}/messages?limit=N&max_body=B&full_body=true.
func (c *Client) PeekBody(ctx context.Context, name string, limit int, o PeekOptions) (*Peek, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if o.MaxBody >= 0 {
		q.Set("max_body", strconv.Itoa(o.MaxBody))
	}
	if o.FullBody {
		q.Set("full_body", "true")
	}
	var v Peek
	return &v, c.get(ctx, "GET", qpath(name, "/messages?"+q.Encode()), nil, &v)
}

// Purge is POST /v1/queues/{name}/purge.
func (c *Client) Purge(ctx context.Context, name string) (*QueueOp, error) {
	var v QueueOp
	return &v, c.get(ctx, "POST", qpath(name, "/purge"), nil, &v)
}

// DeleteQueue is DELETE /v1/queues/{name}.
func (c *Client) DeleteQueue(ctx context.Context, name string) (*QueueOp, error) {
	var v QueueOp
	return &v, c.get(ctx, "DELETE", qpath(name, ""), nil, &v)
}

// Requeue is POST /v1/queues/{name}/requeue?max=N.
func (c *Client) Requeue(ctx context.Context, name string, max int) (*QueueOp, error) {
	var v QueueOp
	return &v, c.get(ctx, "POST", qpath(name, "/requeue?max="+strconv.Itoa(max)), nil, &v)
}

// Topics is GET /v1/topics: the first DefaultTopics topics by name.
func (c *Client) Topics(ctx context.Context) (*TopicList, error) {
	var v TopicList
	return &v, c.get(ctx, "GET", "/v1/topics", nil, &v)
}

// TopicsLimit is GET /v1/topics?limit=N.
func (c *Client) TopicsLimit(ctx context.Context, limit int) (*TopicList, error) {
	var v TopicList
	return &v, c.get(ctx, "GET", "/v1/topics?limit="+strconv.Itoa(limit), nil, &v)
}

// Channels is GET /v1/channels.
func (c *Client) Channels(ctx context.Context) (*ChannelList, error) {
	var v ChannelList
	return &v, c.get(ctx, "GET", "/v1/channels", nil, &v)
}

// Connections is GET /v1/connections.
func (c *Client) Connections(ctx context.Context) (*ConnList, error) {
	var v ConnList
	return &v, c.get(ctx, "GET", "/v1/connections", nil, &v)
}

// CloseConnection is DELETE /v1/connections/{id}.
func (c *Client) CloseConnection(ctx context.Context, id uint64, reason string) (*ConnClosed, error) {
	var v ConnClosed
	p := "/v1/connections/" + strconv.FormatUint(id, 10)
	if reason != "" {
		p += "?reason=" + url.QueryEscape(reason)
	}
	return &v, c.get(ctx, "DELETE", p, nil, &v)
}

// Config is GET /v1/config.
func (c *Client) Config(ctx context.Context) (*appliance.Config, error) {
	var v appliance.Config
	return &v, c.get(ctx, "GET", "/v1/config", nil, &v)
}

// LogLevel is GET /v1/log-level.
func (c *Client) LogLevel(ctx context.Context) (*LogLevel, error) {
	var v LogLevel
	return &v, c.get(ctx, "GET", "/v1/log-level", nil, &v)
}

// SetLogLevel is PUT /v1/log-level.
func (c *Client) SetLogLevel(ctx context.Context, level string) (*LogLevel, error) {
	var v LogLevel
	return &v, c.get(ctx, "PUT", "/v1/log-level", LogLevel{Level: level}, &v)
}

// Backup is POST /v1/backup: the daemon writes a consistent copy of its
// journal to dest (absolute, on its filesystem). progress is called with
// every progress event; the result event is returned. An error event
// becomes *APIError with Status 500.
func (c *Client) Backup(ctx context.Context, dest string, progress func(BackupEvent)) (*BackupEvent, error) {
	resp, err := c.send(ctx, "POST", "/v1/backup", BackupRequest{Path: dest})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev BackupEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, &ConnError{Socket: c.Socket, Err: fmt.Errorf("bad backup event %q: %w", sc.Text(), err)}
		}
		switch ev.Type {
		case "progress":
			if progress != nil {
				progress(ev)
			}
		case "result":
			return &ev, nil
		case "error":
			return nil, &APIError{Status: http.StatusInternalServerError, Message: ev.Error, Hint: ev.Hint}
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return nil, &ConnError{Socket: c.Socket, Err: fmt.Errorf("backup answer ended early: %w", err)}
}
