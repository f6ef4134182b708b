//go:build pprof

package main

// Built with -tags pprof, heraldd serves net/http/pprof on the address in
// HERALDD_PPROF (e.g. 127.0.0.1:6060) for profiling under load:
//
//	go build -tags pprof -o /tmp/heraldd ./cmd/heraldd
//	HERALDD_PPROF=127.0.0.1:6060 /tmp/heraldd ...
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=10
//
// Release builds leave it out: no profiling endpoint exists unless asked
// for at build time, and it listens only where HERALDD_PPROF says.

import (
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
)

func init() {
	addr := os.Getenv("HERALDD_PPROF")
	if addr == "" {
		return
	}
	runtime.SetMutexProfileFraction(100)
	runtime.SetBlockProfileRate(100000)
	go func() {
		if err := http.ListenAndServe(addr, nil); err != nil {
			fmt.Fprintf(os.Stderr, "heraldd: pprof on %s: %v (set HERALDD_PPROF to a free address)\n", addr, err)
		}
	}()
}
