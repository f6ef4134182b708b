package journal

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// errStopRows, returned by a rawQuery row function, ends the read without
// an error.
var errStopRows = errors.New("journal: stop reading rows")

// rawQuery runs query on a pooled reader connection through the SQLite
// driver itself and calls fn with each row's ncol values: int64 for an
// INTEGER, []byte for a BLOB (a copy of its own), string for TEXT, nil for
// NULL. row is reused between calls. Used where database/sql's per-value
// conversions (reflection, a second copy of every BLOB) would cost more
// than the read itself: a queue's page-in.
func (s *Store) rawQuery(ctx context.Context, query string, args []driver.NamedValue, ncol int, fn func(row []driver.Value) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var qerr error
	err = conn.Raw(func(dc any) error {
		qerr = rawRows(ctx, dc, query, args, ncol, fn)
		if ioFailure(qerr) {
			// The connection is not reused: its page cache may keep what
			// the failed read left (SQLite takes a read that came back
			// short for zeros, and drops a connection's cache only when the
			// database changed), so the next page-in on it would fail
			// again, "malformed", until some commit, however well the disk
			// reads by then. database/sql closes a connection whose
			// function returns ErrBadConn.
			return driver.ErrBadConn
		}
		return qerr
	})
	if qerr != nil {
		return qerr
	}
	return err
}

// rawRows is rawQuery's read on the driver connection dc.
func rawRows(ctx context.Context, dc any, query string, args []driver.NamedValue, ncol int, fn func(row []driver.Value) error) error {
	qc, ok := dc.(driver.QueryerContext)
	if !ok {
		return fmt.Errorf("the SQLite driver's connection (%T) cannot run queries", dc)
	}
	rows, err := qc.QueryContext(ctx, query, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	if n := len(rows.Columns()); n != ncol {
		return fmt.Errorf("query returns %d columns, want %d", n, ncol)
	}
	row := make([]driver.Value, ncol)
	for {
		if err := rows.Next(row); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := fn(row); err == errStopRows {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// asInt, asString and asBytes read a driver value of rawQuery's row as
// the journal stored it; NULL is the zero value.
func asInt(v driver.Value) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	case bool:
		if x {
			return 1
		}
	}
	return 0
}

func asString(v driver.Value) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

func asBytes(v driver.Value) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	}
	return nil
}
