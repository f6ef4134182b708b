package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/herald-mq/herald/appliance"
)

// Limits of the API.
const (
	DefaultPeek     = 10
	MaxPeek         = 1000
	DefaultMaxBody  = 1 << 10  // bytes of each body a peek returns
	MaxPeekBody     = 16 << 20 // most bytes of each body a peek returns (full_body)
	maxRequestBytes = 64 << 10
	DefaultTopics   = 1000   // topics GET /v1/topics lists
	MaxTopics       = 100000 // most topics GET /v1/topics lists (limit)
)

// Handler returns the admin API's handler (every route of docs/admin-api.md).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/ready", s.ready)
	mux.HandleFunc("GET /v1/queues", s.queues)
	mux.HandleFunc("GET /v1/queues/{name}", s.queue)
	mux.HandleFunc("DELETE /v1/queues/{name}", s.deleteQueue)
	mux.HandleFunc("GET /v1/queues/{name}/messages", s.peek)
	mux.HandleFunc("POST /v1/queues/{name}/purge", s.purge)
	mux.HandleFunc("POST /v1/queues/{name}/requeue", s.requeue)
	mux.HandleFunc("GET /v1/topics", s.topics)
	mux.HandleFunc("GET /v1/channels", s.channelList)
	mux.HandleFunc("GET /v1/bridges", s.bridgeList) // bridges.go
	mux.HandleFunc("GET /v1/connections", s.connections)
	mux.HandleFunc("DELETE /v1/connections/{id}", s.closeConnection)
	mux.HandleFunc("GET /v1/config", s.config)
	mux.HandleFunc("GET /v1/log-level", s.logLevel)
	mux.HandleFunc("PUT /v1/log-level", s.setLogLevel)
	mux.HandleFunc("POST /v1/backup", s.backup)
	s.streamRoutes(mux) // streams.go
	return jsonErrors(mux)
}

// jsonErrors answers the mux's own 404 and 405 in the API's error format.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &recorder{h: http.Header{}, Code: http.StatusOK}
		mux.ServeHTTP(rec, r)
		switch rec.Code {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.h.Get("Allow"))
			writeError(w, errorf(http.StatusMethodNotAllowed, "allowed: "+rec.h.Get("Allow")+"; see docs/admin-api.md",
				fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path)))
		case http.StatusNotFound:
			writeError(w, errorf(http.StatusNotFound, "see docs/admin-api.md for the endpoints",
				fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)))
		default: // redirects of unclean paths
			for k, v := range rec.h {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.body)
		}
	})
}

// recorder captures the mux's answer when it has no route.
type recorder struct {
	h    http.Header
	Code int
	body []byte
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(code int)        { r.Code = code }
func (r *recorder) Write(b []byte) (int, error) { r.body = append(r.body, b...); return len(b), nil }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "orders.>" stays readable; this is no HTML
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, ErrorBody{Error: e.msg, Hint: e.hint})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := classify(err)
	if e.status >= 500 {
		s.log.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, e)
}

// stillRunning reports whether err says that an operation outlasted
// opContext's timeout and goes on (appliance.ErrStillRunning) while the
// request itself is still there: it is answered 202 Accepted, with what
// the operation did so far.
func stillRunning(r *http.Request, err error) bool {
	return errors.Is(err, appliance.ErrStillRunning) && r.Context().Err() == nil
}

// opContext bounds a broker operation.
func (s *Server) opContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.o.OpTimeout)
}

func (s *Server) audit(r *http.Request, msg string, args ...any) {
	s.log.Info(msg, append(args, peer(r)...)...)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st := s.o.Broker.Stats()
	out := Status{
		Version:       s.o.Version,
		PID:           os.Getpid(),
		StartedAt:     s.o.Started.UTC(),
		UptimeSeconds: time.Since(s.o.Started).Seconds(),
		Ready:         s.isReady() == nil,
		LogLevel:      levelName(s.o.Level),
		DataDir:       s.o.Config.DataDir,
		AdminSocket:   s.o.Socket,
		MetricsListen: s.MetricsAddr(),
		Listeners:     st.Listeners,
		Connections:   st.Connections,
		Totals:        st,
	}
	if out.Listeners == nil {
		out.Listeners = []string{}
		out.Totals.Listeners = []string{}
	}
	out.RestartNeeded = []string{}
	if s.o.RestartNeeded != nil {
		out.RestartNeeded = append(out.RestartNeeded, s.o.RestartNeeded()...)
	}
	for _, q := range s.o.Broker.Queues() {
		out.Queues++
		out.Messages += q.Messages
		out.MessageBytes += q.Bytes
	}
	if s.o.Journal != nil {
		js := s.o.Journal.Status()
		out.Journal = &js
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) isReady() error {
	if s.closed.Load() {
		return errors.New("shutting down")
	}
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			return err
		}
	}
	if ok, since := s.o.Broker.JournalHealthy(); !ok {
		return fmt.Errorf("journal writes failing since %s: check the data directory's disk (df -h, dmesg) and the log (journalctl -u herald)", since.UTC().Format(time.RFC3339))
	}
	if err := s.o.Broker.PageInsHealthy(); err != nil {
		return err
	}
	return nil
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if err := s.isReady(); err != nil {
		writeError(w, errorf(http.StatusServiceUnavailable, "wait and retry: herald await-ready --timeout 60s", "not ready: "+err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, Ready{Ready: true})
}

func (s *Server) queues(w http.ResponseWriter, r *http.Request) {
	qs := s.o.Broker.Queues()
	if qs == nil {
		qs = []appliance.QueueView{}
	}
	writeJSON(w, http.StatusOK, QueueList{Queues: qs})
}

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q, ok := s.o.Broker.Queue(name)
	if !ok {
		writeError(w, noQueue(name))
		return
	}
	writeJSON(w, http.StatusOK, q)
}

func noQueue(name string) *apiError {
	return errorf(http.StatusNotFound, "list the queues with: herald queues", fmt.Sprintf("%v %q", appliance.ErrNoQueue, name))
}

// intParam reads a non-negative integer query parameter.
func intParam(r *http.Request, key string, def, max int) (int, *apiError) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, errorf(http.StatusBadRequest, fmt.Sprintf("give %s as a whole number, 0 or more", key), fmt.Sprintf("bad %s %q", key, v))
	}
	if max > 0 && n > max {
		return 0, errorf(http.StatusBadRequest, fmt.Sprintf("ask for at most %d", max), fmt.Sprintf("%s %d is too large", key, n))
	}
	return n, nil
}

func (s *Server) peek(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	limit, e := intParam(r, "limit", DefaultPeek, MaxPeek)
	if e != nil {
		writeError(w, e)
		return
	}
	maxBody, e := intParam(r, "max_body", DefaultMaxBody, MaxPeekBody)
	if e != nil {
		writeError(w, e)
		return
	}
	switch v := r.URL.Query().Get("full_body"); v {
	case "", "false", "0":
	case "true", "1":
		if r.URL.Query().Has("max_body") {
			writeError(w, errorf(http.StatusBadRequest, "give either full_body or max_body", "full_body with max_body"))
			return
		}
		maxBody = MaxPeekBody
	default:
		writeError(w, errorf(http.StatusBadRequest, "give full_body=true or false", fmt.Sprintf("bad full_body %q", v)))
		return
	}
	if limit == 0 {
		if _, ok := s.o.Broker.Queue(name); !ok {
			writeError(w, noQueue(name))
			return
		}
		writeJSON(w, http.StatusOK, Peek{Queue: name, Messages: []MessageView{}})
		return
	}
	// The answer is written one message at a time as the journal reads
	// them: only one body (at most maxBody bytes) is in memory at once.
	ctx, cancel := s.opContext(r)
	defer cancel()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	started := false
	start := func() error {
		started = true
		qn, _ := json.Marshal(name)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, err := fmt.Fprintf(w, "{\"queue\": %s, \"messages\": [\n", qn)
		return err
	}
	err := s.o.Broker.Peek(ctx, name, limit, maxBody, func(m *appliance.Message, bodyBytes int) error {
		sep := ",\n"
		if !started {
			if err := start(); err != nil {
				return err
			}
			sep = ""
		}
		if _, err := io.WriteString(w, sep+"  "); err != nil {
			return err
		}
		return enc.Encode(messageView(m, bodyBytes, maxBody))
	})
	if err != nil && !started {
		s.fail(w, r, err)
		return
	}
	if err != nil {
		// The status is sent: the answer stays unfinished (invalid JSON)
		// so that no client takes it for the whole list.
		s.log.Warn("admin peek failed mid-answer", "queue", name, "err", err)
		return
	}
	if !started {
		start()
	}
	io.WriteString(w, "]}\n")
}

// messageView is m as a peek shows it; m.Body may be a prefix of the
// message's body, whose whole length is bodyBytes.
func messageView(m *appliance.Message, bodyBytes, maxBody int) MessageView {
	v := MessageView{
		ID:         m.ID,
		Headers:    make(map[string]string, len(m.Headers)),
		BodyBytes:  max(bodyBytes, len(m.Body)),
		Deliveries: m.Deliveries,
		EnqueuedAt: time.UnixMilli(m.Enqueued).UTC(),
		Group:      m.Group,
		DedupID:    m.DedupID,
	}
	for _, h := range m.Headers {
		if _, dup := v.Headers[h.Key]; !dup {
			v.Headers[h.Key] = h.Value
		}
	}
	body := m.Body
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	v.BodyTruncated = len(body) < v.BodyBytes
	v.Body = strings.ToValidUTF8(string(body), "\uFFFD")
	if !utf8.Valid(body) {
		v.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	if m.NotBefore > 0 {
		t := time.UnixMilli(m.NotBefore).UTC()
		v.NotBefore = &t
	}
	if m.Expires > 0 {
		t := time.UnixMilli(m.Expires).UTC()
		v.ExpiresAt = &t
	}
	return v
}

func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := s.opContext(r)
	defer cancel()
	n, err := s.o.Broker.Purge(ctx, name)
	if stillRunning(r, err) {
		// The purge outlasted the operation timeout, not failed: it goes
		// on, and the answer says so with what it deleted so far.
		s.audit(r, "admin: queue purge goes on past the request", "queue", name, "messages_so_far", n)
		writeJSON(w, http.StatusAccepted, QueueOp{Queue: name, Purged: &n, Running: true})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "admin: queue purged", "queue", name, "messages", n)
	writeJSON(w, http.StatusOK, QueueOp{Queue: name, Purged: &n})
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := s.opContext(r)
	defer cancel()
	n, err := s.o.Broker.DeleteQueue(ctx, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "admin: queue deleted", "queue", name, "messages", n)
	writeJSON(w, http.StatusOK, QueueOp{Queue: name, Deleted: &n})
}

func (s *Server) requeue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	maxN, e := intParam(r, "max", 0, 0)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	n, err := s.o.Broker.Requeue(ctx, name, maxN)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	dlq := s.o.Config.Queues.DeadLetterQueue + name
	s.audit(r, "admin: dead letters requeued", "queue", name, "dlq", dlq, "messages", n)
	writeJSON(w, http.StatusOK, QueueOp{Queue: name, DLQ: dlq, Requeued: &n})
}

func (s *Server) topics(w http.ResponseWriter, r *http.Request) {
	limit, e := intParam(r, "limit", DefaultTopics, MaxTopics)
	if e != nil {
		writeError(w, e)
		return
	}
	ts, total := s.o.Broker.TopicsPage(limit)
	if ts == nil {
		ts = []appliance.TopicView{}
	}
	writeJSON(w, http.StatusOK, TopicList{Topics: ts, Total: total})
}

func (s *Server) channelList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, ChannelList{Channels: s.channelViews()})
}

func (s *Server) connections(w http.ResponseWriter, r *http.Request) {
	cs := s.o.Broker.Connections()
	if cs == nil {
		cs = []appliance.ConnView{}
	}
	writeJSON(w, http.StatusOK, ConnList{Connections: cs})
}

func (s *Server) closeConnection(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, "give the numeric id shown by: herald connections", fmt.Sprintf("bad connection id %q", r.PathValue("id"))))
		return
	}
	reason := r.URL.Query().Get("reason")
	if reason == "" {
		reason = "closed by the operator"
	}
	if !s.o.Broker.CloseConnection(id, reason) {
		writeError(w, errorf(http.StatusNotFound, "list the connections with: herald connections", fmt.Sprintf("no connection %d", id)))
		return
	}
	s.audit(r, "admin: connection closed", "conn", id, "reason", reason)
	writeJSON(w, http.StatusOK, ConnClosed{ID: id, Closed: true, Reason: reason})
}

func (s *Server) config(w http.ResponseWriter, r *http.Request) {
	// Channel keys carry json:"-"; nothing else in Config is secret. Empty
	// lists are [] rather than null.
	cfg := s.o.Config
	if s.o.CurrentConfig != nil {
		cfg = s.o.CurrentConfig()
	}
	if cfg.Queues.Policies == nil {
		cfg.Queues.Policies = []appliance.QueuePolicy{}
	}
	writeJSON(w, http.StatusOK, cfg)
}

func levelName(lv *slog.LevelVar) string {
	if lv == nil {
		return ""
	}
	return strings.ToLower(lv.Level().String())
}

func (s *Server) logLevel(w http.ResponseWriter, r *http.Request) {
	if s.o.Level == nil {
		writeError(w, errorf(http.StatusNotImplemented, "", "this daemon has no adjustable log level"))
		return
	}
	writeJSON(w, http.StatusOK, LogLevel{Level: levelName(s.o.Level)})
}

// ParseLevel parses the four log level names of the config.
func ParseLevel(name string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q: want debug, info, warn or error", name)
}

func (s *Server) setLogLevel(w http.ResponseWriter, r *http.Request) {
	if s.o.Level == nil {
		writeError(w, errorf(http.StatusNotImplemented, "", "this daemon has no adjustable log level"))
		return
	}
	var req LogLevel
	if e := decodeBody(r, &req, `{"level": "debug"}`); e != nil {
		writeError(w, e)
		return
	}
	lv, err := ParseLevel(req.Level)
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, `send {"level": "debug"} (or info, warn, error)`, err.Error()))
		return
	}
	prev := levelName(s.o.Level)
	s.o.Level.Set(lv)
	s.log.Log(r.Context(), max(lv, slog.LevelInfo), "admin: log level changed", append([]any{"level", levelName(s.o.Level), "previous", prev}, peer(r)...)...)
	writeJSON(w, http.StatusOK, LogLevel{Level: levelName(s.o.Level), Previous: prev})
}

func decodeBody(r *http.Request, v any, example string) *apiError {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "send a JSON body like "+example, "bad request body: "+err.Error())
	}
	return nil
}

// backup streams NDJSON BackupEvents while the journal is copied to the
// requested path.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if s.o.Journal == nil {
		writeError(w, errorf(http.StatusNotImplemented, "", "this daemon has no journal to back up"))
		return
	}
	var req BackupRequest
	if e := decodeBody(r, &req, `{"path": "/var/backups/herald.db"}`); e != nil {
		writeError(w, e)
		return
	}
	if !filepath.IsAbs(req.Path) {
		writeError(w, errorf(http.StatusBadRequest, "give an absolute path: the daemon writes the file (herald backup makes relative paths absolute)", fmt.Sprintf("backup path %q is not absolute", req.Path)))
		return
	}
	dest := filepath.Clean(req.Path)
	if _, err := os.Lstat(dest); err == nil {
		writeError(w, errorf(http.StatusConflict, "choose a new file name, or remove the old backup first", fmt.Sprintf("backup destination %s exists", dest)))
		return
	}
	if fi, err := os.Stat(filepath.Dir(dest)); err != nil || !fi.IsDir() {
		writeError(w, errorf(http.StatusBadRequest, "create the directory first; it must be writable by the daemon's user", fmt.Sprintf("backup directory %s does not exist", filepath.Dir(dest))))
		return
	}
	if !s.backupMu.TryLock() {
		writeError(w, errorf(http.StatusConflict, "wait for the running backup to finish", "a backup is already running"))
		return
	}
	defer s.backupMu.Unlock()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	emit := func(ev BackupEvent) {
		enc.Encode(ev)
		rc.Flush()
	}
	rc.Flush()
	start := time.Now()
	var last time.Time
	var pages int
	s.audit(r, "admin: backup started", "path", dest)
	err := s.o.Journal.Backup(r.Context(), dest, func(done, total int) {
		pages = total
		if now := time.Now(); now.Sub(last) >= 100*time.Millisecond || done == total {
			last = now
			emit(BackupEvent{Type: "progress", PagesDone: done, PagesTotal: total})
		}
	})
	if err != nil {
		hint := "see the daemon's log (journalctl -u herald, the systemd unit) for details"
		if errors.Is(err, os.ErrPermission) {
			hint = "the daemon writes the backup: choose a directory its user can write (for example its data directory)"
		}
		s.log.Warn("admin: backup failed", "path", dest, "err", err)
		emit(BackupEvent{Type: "error", Error: err.Error(), Hint: hint})
		return
	}
	ev := BackupEvent{Type: "result", Path: dest, PagesTotal: pages, Seconds: time.Since(start).Seconds()}
	if fi, err := os.Stat(dest); err == nil {
		ev.Bytes = fi.Size()
	}
	s.audit(r, "admin: backup written", "path", dest, "bytes", ev.Bytes, "took", time.Since(start).Round(time.Millisecond))
	emit(ev)
}
