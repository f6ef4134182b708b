package admin_test

import (
	"strings"
	"testing"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
)

// The admin JSON is for people and programs, not HTML: a topic pattern
// keeps its ">" and an empty list is [] rather than null.
func TestAPI_JSONReadable(t *testing.T) {
	d := admintest.Start(t, nil)
	c := admin.NewClient(d.Socket)
	defer c.Close()
	conn := d.Dial(t)
	if _, err := conn.Subscribe("/topic/orders.>", "auto"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.SendReceipt(ctxT(t), "/topic/orders.new", []byte("x")); err != nil {
		t.Fatal(err)
	}
	b, err := c.Do(ctxT(t), "GET", "/v1/topics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"orders.>"`) || strings.Contains(string(b), `\u003e`) {
		t.Errorf("topics JSON: got %s, want the pattern written as \"orders.>\"", b)
	}
	b, err = c.Do(ctxT(t), "GET", "/v1/config", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"policies": []`) {
		t.Errorf("config JSON without queue policies: want \"policies\": [], got %s", b)
	}
}
