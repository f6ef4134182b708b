package main

import (
	"flag"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-mq/herald/appliance"
)

// authFlagValues are the flags of users and TLS, applied over the config.
type authFlagValues struct {
	usersFile, tlsListen, tlsCert, tlsKey *string
}

func authFlags(fs *flag.FlagSet) authFlagValues {
	return authFlagValues{
		usersFile: fs.String("users-file", "", "users file: users, password hashes, permissions (overrides auth.users_file; edit it with herald user)"),
		tlsListen: fs.String("tls-listen", "", "STOMP over TLS listen address (overrides stomp.tls_listen)"),
		tlsCert:   fs.String("tls-cert", "", "TLS certificate, PEM (overrides stomp.tls_cert)"),
		tlsKey:    fs.String("tls-key", "", "TLS private key, PEM (overrides stomp.tls_key)"),
	}
}

func (a authFlagValues) apply(cfg *appliance.Config) {
	for _, f := range []struct {
		v   *string
		dst *string
	}{
		{a.usersFile, &cfg.Auth.UsersFile},
		{a.tlsListen, &cfg.Stomp.TLSListen},
		{a.tlsCert, &cfg.Stomp.TLSCert},
		{a.tlsKey, &cfg.Stomp.TLSKey},
	} {
		if *f.v != "" {
			*f.dst = *f.v
		}
	}
}

// startAuth loads the users file and puts its policy in force; the broker's
// authentication counters go to the metrics registry.
func (d *daemon) startAuth() error {
	p, warns, err := appliance.LoadAuth(d.cfg)
	if err != nil {
		return err
	}
	for _, w := range warns {
		d.log.Warn(w)
	}
	d.broker.SetAuth(p)
	if p.Open() {
		d.log.Info("no users file: anonymous clients with full access", "loopback_only", !d.cfg.Auth.AllowAnonymous)
	} else {
		d.log.Info("users loaded", "users_file", d.cfg.Auth.UsersFile, "users", p.Users(), "allow_anonymous", d.cfg.Auth.AllowAnonymous)
	}
	d.adminMetrics().Registry().MustRegister(authCollector{d.broker}, kvCollector{d.broker}, streamCollector{d.broker})
	return nil
}

// listenTLS starts the TLS listener when stomp.tls_listen is set.
func (d *daemon) listenTLS() error {
	if d.cfg.Stomp.TLSListen == "" {
		return nil
	}
	tc, err := appliance.TLSConfig(d.cfg.Stomp)
	if err != nil {
		return err
	}
	addr, err := d.broker.ListenTLS(d.cfg.Stomp.TLSListen, tc)
	if err != nil {
		return err
	}
	d.log.Info("STOMP over TLS", "listen", addr.String(), "client_ca", d.cfg.Stomp.TLSClientCA)
	return nil
}

var (
	dAuthFailures = prometheus.NewDesc("herald_auth_failures_total", "STOMP CONNECTs refused: wrong login, passcode or certificate, or anonymous not allowed.", nil, nil)
	dAuthDenied   = prometheus.NewDesc("herald_auth_denied_total", "SEND and SUBSCRIBE frames refused for a missing permission, by user (\"anonymous\" for connections without a login).", []string{"user"}, nil)
	dAuthCmdRuns  = prometheus.NewDesc("herald_auth_command_runs_total", "Runs of auth.command.", nil, nil)
	dAuthCmdErrs  = prometheus.NewDesc("herald_auth_command_errors_total", "Runs of auth.command that failed: timeout, crash, exit code other than 0 or 1.", nil, nil)
	dAuthCmdHits  = prometheus.NewDesc("herald_auth_command_cache_hits_total", "Logins allowed from auth.command's cache of positive answers.", nil, nil)
)

// authCollector reads the broker's authentication counters at scrape time.
type authCollector struct{ b *appliance.Broker }

func (c authCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dAuthFailures
	ch <- dAuthDenied
	ch <- dAuthCmdRuns
	ch <- dAuthCmdErrs
	ch <- dAuthCmdHits
}

func (c authCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.AuthStats()
	ch <- prometheus.MustNewConstMetric(dAuthFailures, prometheus.CounterValue, float64(st.Failures))
	ch <- prometheus.MustNewConstMetric(dAuthCmdRuns, prometheus.CounterValue, float64(st.CommandRuns))
	ch <- prometheus.MustNewConstMetric(dAuthCmdErrs, prometheus.CounterValue, float64(st.CommandErrors))
	ch <- prometheus.MustNewConstMetric(dAuthCmdHits, prometheus.CounterValue, float64(st.CommandCacheHits))
	for user, n := range st.Denied {
		ch <- prometheus.MustNewConstMetric(dAuthDenied, prometheus.CounterValue, float64(n), user)
	}
}
