package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"github.com/urfave/cli/v2"
)

// Connection options of send and receive beyond --login and --passcode:
// STOMP over TLS, with an optional client certificate (mTLS: heraldd maps
// its common name or a subject alternative name to a user).
func authFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "tls", EnvVars: []string{"HERALD_TLS"}, Usage: "connect with TLS (heraldd's stomp.tls_listen, usually port 61614)"},
		&cli.StringFlag{Name: "ca", EnvVars: []string{"HERALD_CA"}, Usage: "CA certificate `FILE` (PEM) to verify the server with, instead of the system's (implies --tls)"},
		&cli.StringFlag{Name: "cert", EnvVars: []string{"HERALD_CERT"}, Usage: "client certificate `FILE` (PEM) to log in with (implies --tls; needs --key)"},
		&cli.StringFlag{Name: "key", EnvVars: []string{"HERALD_KEY"}, Usage: "private key `FILE` (PEM) of --cert"},
	}
}

// clientTLS returns the TLS configuration the flags ask for, or nil for
// plain TCP.
func clientTLS(cCtx *cli.Context) (*tls.Config, error) {
	ca, cert, key := cCtx.String("ca"), cCtx.String("cert"), cCtx.String("key")
	if !cCtx.Bool("tls") && ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usageErrorf("--ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("--ca %s: no PEM certificate in it", ca)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, usageErrorf("--cert and --key go together (a client certificate and its private key)")
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, usageErrorf("--cert %s / --key %s: %v", cert, key, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// tlsHint is added to connection errors when TLS is in use.
func tlsHint(tc *tls.Config) string {
	if tc == nil {
		return ""
	}
	return " (over TLS: check --ca, and that --server names heraldd's stomp.tls_listen)"
}
