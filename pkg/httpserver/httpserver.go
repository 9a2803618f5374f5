// Package httpserver builds every HTTP server Gantry runs (the scheduler's metrics,
// probes and webhooks, the node agent's metrics), so that each has header, read,
// write and idle timeouts: a client that opens a connection and sends nothing, or
// sends slowly, cannot hold a goroutine and a file descriptor forever.
//
// TestEveryServerHasTimeouts fails on an http.Server built elsewhere in the
// product, or on net/http's package-level ListenAndServe and Serve functions, whose
// servers have no timeouts. It imports only the standard library.
package httpserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// The timeouts of every server. Webhook calls are bounded by the API server at 30s
// at most; a scrape by Prometheus' scrape timeout (10s by default).
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 1 << 20
)

// New returns a server for handler with Gantry's timeouts.
func New(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// Serve serves srv on ln in the background until ctx ends, then closes it. TLS is
// served when srv.TLSConfig is set (its certificates or GetCertificate). onError
// gets the error a server stops with, other than being closed.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, onError func(error)) {
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) && onError != nil {
			onError(err)
		}
	}()
}
