package streamcore

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseStart reads an x-stream-offset value: first, last, next, offset=N,
// a bare N, or timestamp=T (seconds since the epoch, as RabbitMQ takes it;
// returned in ts with isTS set, for the caller to resolve to an offset).
// Empty means next.
func ParseStart(v string) (st Start, ts int64, isTS bool, err error) {
	switch {
	case v == "" || v == "next":
		return Start{Kind: StartNext}, 0, false, nil
	case v == "first":
		return Start{Kind: StartFirst}, 0, false, nil
	case v == "last":
		return Start{Kind: StartLast}, 0, false, nil
	case strings.HasPrefix(v, "timestamp="):
		t, err := strconv.ParseInt(v[len("timestamp="):], 10, 64)
		if err != nil || t < 0 || t > 1<<40 {
			return Start{}, 0, false, fmt.Errorf("x-stream-offset %q: timestamp=T takes seconds since the epoch", v)
		}
		return Start{Kind: StartOffset}, t, true, nil
	}
	off, err := strconv.ParseUint(strings.TrimPrefix(v, "offset="), 10, 63)
	if err != nil {
		return Start{}, 0, false, fmt.Errorf("x-stream-offset %q: want first, last, next, offset=N or timestamp=T (seconds)", v)
	}
	return Start{Kind: StartOffset, Offset: off}, 0, false, nil
}

// AckToken is the ack (and message-id) header of a stream MESSAGE for
// subscription id at offset off.
func AckToken(id SubID, off uint64) string {
	return "S" + strconv.FormatUint(uint64(id), 10) + "." + strconv.FormatUint(off, 10)
}

// ParseAckToken reads an AckToken.
func ParseAckToken(token string) (SubID, uint64, bool) {
	rest, ok := strings.CutPrefix(token, "S")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	id, err1 := strconv.ParseUint(a, 10, 64)
	off, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return SubID(id), off, true
}
