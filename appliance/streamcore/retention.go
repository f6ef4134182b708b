package streamcore

// Policy is a stream's retention: messages older than MaxAge (ms), and the
// oldest beyond MaxBytes or MaxCount, are removed. Zero: no such bound.
type Policy struct {
	MaxAge   int64
	MaxBytes int64
	MaxCount int64
}

// Aged is a head entry with its timestamp, for PlanTrim.
type Aged struct {
	Offset uint64
	TS     int64
	Size   int64
}

// PlanTrim decides one retention step from the first entries of a stream
// (head, in offset order) holding count messages of bytes in all, at time
// now (ms): the offset below which to delete (upto) and how many of head
// that is. n == 0: nothing to remove in this page.
func PlanTrim(p Policy, head []Aged, count, bytes, now int64) (upto uint64, n int) {
	for _, e := range head {
		over := (p.MaxCount > 0 && count > p.MaxCount) ||
			(p.MaxBytes > 0 && bytes > p.MaxBytes) ||
			(p.MaxAge > 0 && e.TS < now-p.MaxAge)
		if !over {
			break
		}
		count--
		bytes -= e.Size
		upto = e.Offset + 1
		n++
	}
	return upto, n
}
