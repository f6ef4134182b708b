package admin

import (
	"context"
	"net/http"

	"github.com/herald-mq/herald/bridge/bridgeview"
)

// BridgeStats lists the bridges; the daemon registers one with
// Server.SetBridges when [[bridge]]s are configured.
type BridgeStats interface {
	Bridges() []bridgeview.View
}

// BridgeList is GET /v1/bridges.
type BridgeList struct {
	Bridges []bridgeview.View `json:"bridges"`
}

// SetBridges registers the bridges' views, served by GET /v1/bridges.
// Safe to call at any time.
func (s *Server) SetBridges(b BridgeStats) {
	if b == nil {
		s.bridges.Store(nil)
		return
	}
	s.bridges.Store(&b)
}

func (s *Server) bridgeViews() []bridgeview.View {
	if p := s.bridges.Load(); p != nil {
		if v := (*p).Bridges(); v != nil {
			return v
		}
	}
	return []bridgeview.View{}
}

func (s *Server) bridgeList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, BridgeList{Bridges: s.bridgeViews()})
}

// Bridges is GET /v1/bridges.
func (c *Client) Bridges(ctx context.Context) (*BridgeList, error) {
	var v BridgeList
	return &v, c.get(ctx, http.MethodGet, "/v1/bridges", nil, &v)
}
