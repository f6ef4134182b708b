package stomp_test

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// What ReadFrame reports through OnBody is what it allocates for a body:
// the buffers a growing body leaves behind stay allocated until the
// garbage collector frees them, and the memory budget must count them
// (a 1 MiB body read by doubling allocated about 3 MiB and was counted at
// 1 MiB). The body kept has no spare capacity: it is counted at its
// length for as long as a queue holds it.
func TestReader_BodyChargedAsAllocated(t *testing.T) {
	for _, n := range []int{100, 64<<10 + 1, 1 << 20, 1<<20 + 1, 3<<20 + 12345} {
		for _, withLength := range []bool{true, false} {
			t.Run(strconv.Itoa(n)+"/content-length="+strconv.FormatBool(withLength), func(t *testing.T) {
				var in bytes.Buffer
				in.WriteString("SEND\ndestination:/queue/a\n")
				if withLength {
					in.WriteString("content-length:" + strconv.Itoa(n) + "\n")
				}
				in.WriteString("\n")
				in.Write(bytes.Repeat([]byte{'b'}, n))
				in.WriteByte(0)
				r := stomp.NewReader(&in, stomp.Limits{MaxBody: 4 << 20})
				charged := 0
				r.OnBody(func(k int) { charged += k })

				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				f, err := r.ReadFrame()
				runtime.ReadMemStats(&after)
				if err != nil {
					t.Fatal(err)
				}
				if len(f.Body) != n {
					t.Fatalf("body of %d bytes, want %d", len(f.Body), n)
				}
				if cap(f.Body) != len(f.Body) {
					t.Fatalf("body of %d bytes kept with capacity %d: the spare %d bytes are counted nowhere", len(f.Body), cap(f.Body), cap(f.Body)-len(f.Body))
				}
				// Beside the body: the frame, its header text, rounding
				// of large allocations to pages.
				const slack = 16 << 10
				allocated := int(after.TotalAlloc - before.TotalAlloc)
				if allocated > charged+slack {
					t.Fatalf("reading a body of %d bytes allocated %d bytes and charged %d through OnBody, want at most %d more allocated than charged", n, allocated, charged, slack)
				}
				if charged > 2*n+64<<10 {
					t.Fatalf("a body of %d bytes charged %d, want at most twice its size and one step", n, charged)
				}
			})
		}
	}
}
