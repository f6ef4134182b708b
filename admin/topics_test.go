package admin_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
)

// TestAPI_TopicsLimited lists the first topics by name with the total.
func TestAPI_TopicsLimited(t *testing.T) {
	d := admintest.Start(t, nil)
	c := admin.NewClient(d.Socket)
	defer c.Close()
	conn := d.Dial(t)
	for i := range 12 {
		if _, err := conn.SendReceipt(ctxT(t), fmt.Sprintf("/topic/t.%02d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	tl, err := c.TopicsLimit(ctxT(t), 5)
	if err != nil || len(tl.Topics) != 5 || tl.Total != 12 || tl.Topics[0].Name != "t.00" || tl.Topics[4].Name != "t.04" {
		t.Fatalf("topics?limit=5: got %+v, %v; want t.00..t.04 of 12", tl, err)
	}
	tl, err = c.Topics(ctxT(t))
	if err != nil || len(tl.Topics) != 12 || tl.Total != 12 {
		t.Fatalf("topics: got %+v, %v; want all 12, total 12", tl, err)
	}
	st, err := c.Status(ctxT(t))
	if err != nil || st.Totals.TopicsForgotten != 0 || st.Totals.LastValueEvicted != 0 {
		t.Errorf("status totals: got %+v, %v; want no topic forgotten, no last value evicted", st, err)
	}
	_, err = c.Do(ctxT(t), "GET", "/v1/topics?limit="+strconv.Itoa(admin.MaxTopics+1), nil)
	var ae *admin.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Errorf("topics?limit=%d: got %v, want a 400", admin.MaxTopics+1, err)
	}
}
