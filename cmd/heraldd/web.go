package main

import (
	"crypto/tls"
	"flag"

	"github.com/herald-mq/herald/appliance"
)

// webFlagValues are the flags of the web listener, applied over the config.
type webFlagValues struct {
	listen *string
}

func webFlags(fs *flag.FlagSet) webFlagValues {
	return webFlagValues{
		listen: fs.String("web-listen", "", "HTTP address for browsers: STOMP over WebSocket at /stomp, server-sent events at /events (overrides web.listen; default none)"),
	}
}

func (w webFlagValues) apply(cfg *appliance.Config) {
	if *w.listen != "" {
		cfg.Web.Listen = *w.listen
	}
}

// listenWeb starts the web listener when web.listen is set: HTTPS with the
// STOMP certificate when web.tls is true.
func (d *daemon) listenWeb() error {
	if d.cfg.Web.Listen == "" {
		return nil
	}
	var tc *tls.Config
	if d.cfg.Web.TLS {
		var err error
		if tc, err = appliance.TLSConfig(d.cfg.Stomp); err != nil {
			return err
		}
	}
	addr, err := d.broker.ListenWeb(d.cfg.Web.Listen, tc, nil)
	if err != nil {
		return err
	}
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	d.log.Info("web listener", "listen", addr.String(), "stomp_websocket", scheme+"://"+addr.String()+"/stomp", "events", scheme+"://"+addr.String()+"/events", "dashboard", scheme+"://"+addr.String()+"/")
	return nil
}
