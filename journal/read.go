package journal

import (
	"context"
	"database/sql/driver"
	"fmt"
	"math"

	"github.com/herald-mq/herald/appliance"
)

// Queues lists every queue that holds messages.
func (s *Store) Queues(ctx context.Context) ([]appliance.QueueState, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT q.name, count(*), coalesce(sum(m.size),0), coalesce(min(m.enqueued),0), max(m.id), q.mark
		FROM messages m JOIN queues q ON q.id = m.qid GROUP BY m.qid ORDER BY q.name`)
	if err != nil {
		return nil, fmt.Errorf("journal: list queues: %w", err)
	}
	defer rows.Close()
	var out []appliance.QueueState
	for rows.Next() {
		var q appliance.QueueState
		var maxID, mark int64
		if err := rows.Scan(&q.Name, &q.Count, &q.Bytes, &q.Oldest, &maxID, &mark); err != nil {
			return nil, fmt.Errorf("journal: list queues: %w", err)
		}
		q.MaxID, q.Mark = uint64(maxID), uint64(mark)
		out = append(out, q)
	}
	return out, rows.Err()
}

// deliveriesCols are a message's delivery count (see the claims table and
// queues.mark in schema.go) and whether it has a claims row, over
// fromMessages.
const (
	deliveriesCols = `CASE WHEN c.id IS NULL THEN max(m.deliveries, m.id <= q.mark) ELSE max(m.deliveries, c.deliveries) END, c.id IS NOT NULL`
	fromMessages   = `FROM messages m JOIN queues q ON q.id = m.qid LEFT JOIN claims c ON c.id = m.id`
)

// Load returns up to limit messages of queue with ID > after, in ID order.
func (s *Store) Load(ctx context.Context, queue string, after uint64, limit int) ([]*appliance.Message, error) {
	return s.Page(ctx, appliance.PageRequest{Queue: queue, After: after, Limit: limit})
}

// Page loads a page of a queue's messages in ID order: one message group's
// only when r.Group is set (index messages_grp), and bounded in bytes by
// r.MaxBytes (by the size column: rows past the budget are never read).
func (s *Store) Page(ctx context.Context, r appliance.PageRequest) ([]*appliance.Message, error) {
	const cols = `SELECT m.id, m.enqueued, ` + deliveriesCols + `, m.not_before, m.expires, m.grp, m.flags, m.size, m.headers, m.body ` + fromMessages
	query := cols + ` WHERE q.name = ? AND m.id > ? ORDER BY m.id LIMIT ?`
	args := []driver.NamedValue{{Ordinal: 1, Value: r.Queue}, {Ordinal: 2, Value: int64(r.After)}, {Ordinal: 3, Value: int64(r.Limit)}}
	if r.Group != "" {
		query = cols + ` WHERE q.name = ? AND m.grp = ? AND m.grp != '' AND m.id > ? ORDER BY m.id LIMIT ?`
		args = []driver.NamedValue{{Ordinal: 1, Value: r.Queue}, {Ordinal: 2, Value: r.Group}, {Ordinal: 3, Value: int64(r.After)}, {Ordinal: 4, Value: int64(r.Limit)}}
	}
	queue := r.Queue
	var out []*appliance.Message
	var total int64
	// The rows are read from the driver itself: database/sql's Scan would
	// convert each value through reflection and copy each body and header
	// block a second time (the driver's copy is already the caller's),
	// about a fifth of a page-in's CPU in a deep queue's drain.
	err := s.rawQuery(ctx, query, args, 11, func(row []driver.Value) error {
		if r.MaxBytes > 0 && total >= r.MaxBytes {
			return errStopRows
		}
		m := &appliance.Message{Queue: queue}
		id, size := asInt(row[0]), asInt(row[8])
		m.ID = uint64(id)
		m.Enqueued, m.Deliveries, m.ClaimRow = asInt(row[1]), int(asInt(row[2])), asInt(row[3]) != 0
		m.NotBefore, m.Expires = asInt(row[4]), asInt(row[5])
		m.Group = asString(row[6])
		flags := asInt(row[7])
		m.Body = asBytes(row[10])
		total += size
		var err error
		if m.Headers, err = decodeHeaders(asBytes(row[9])); err != nil {
			return fmt.Errorf("message %d: %w", id, err)
		}
		if flags&flagZstd != 0 {
			if m.Body, err = decompress(m.Body); err != nil {
				return fmt.Errorf("message %d: %w", id, err)
			}
		}
		if v := m.Headers.Get("dedup-id"); v != "" {
			m.DedupID = v
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.readErrors.Add(1)
		}
		return nil, fmt.Errorf("journal: load %s: %w", queue, err)
	}
	return out, nil
}

// LoadPrefix calls fn with up to limit messages of queue with ID > after, in
// ID order, one row at a time, each with at most maxBody bytes of its body
// (maxBody < 0: the whole body) and the length of its whole body. Only the
// prefix of an uncompressed body is read from the database; a compressed
// body is read whole (its compressed form, one row at a time) and
// decompressed only up to maxBody bytes. The body passed to fn is not
// retained by the journal; fn must not keep m after it returns if it wants
// the memory back.
func (s *Store) LoadPrefix(ctx context.Context, queue string, after uint64, limit, maxBody int, fn func(m *appliance.Message, bodyBytes int) error) error {
	if maxBody < 0 {
		maxBody = math.MaxInt32
	}
	rows, err := s.db.QueryContext(ctx, `SELECT m.id, m.enqueued, `+deliveriesCols+`, m.not_before, m.expires, m.grp, m.flags, m.size, m.headers,
			CASE WHEN m.flags & ? != 0 THEN m.body ELSE substr(m.body, 1, ?) END, length(m.body)
		`+fromMessages+` WHERE q.name = ? AND m.id > ? ORDER BY m.id LIMIT ?`,
		flagZstd, maxBody, queue, int64(after), limit)
	if err != nil {
		return fmt.Errorf("journal: load %s: %w", queue, err)
	}
	defer rows.Close()
	for rows.Next() {
		m := &appliance.Message{Queue: queue}
		var id int64
		var flags, size, stored int
		var hb []byte
		if err := rows.Scan(&id, &m.Enqueued, &m.Deliveries, &m.ClaimRow, &m.NotBefore, &m.Expires, &m.Group, &flags, &size, &hb, &m.Body, &stored); err != nil {
			return fmt.Errorf("journal: load %s: %w", queue, err)
		}
		m.ID = uint64(id)
		if m.Headers, err = decodeHeaders(hb); err != nil {
			return fmt.Errorf("journal: load %s message %d: %w", queue, id, err)
		}
		bodyBytes := stored
		if flags&flagZstd != 0 {
			// size is Message.Size() of the stored message: the body's
			// length plus its headers' weight.
			z := m.Body
			m.Body = nil
			bodyBytes = size - m.Size()
			if m.Body, err = decompressPrefix(z, maxBody); err != nil {
				return fmt.Errorf("journal: load %s message %d: %w", queue, id, err)
			}
			bodyBytes = max(bodyBytes, len(m.Body))
		}
		if v := m.Headers.Get("dedup-id"); v != "" {
			m.DedupID = v
		}
		if err := fn(m, bodyBytes); err != nil {
			return err
		}
	}
	return rows.Err()
}
