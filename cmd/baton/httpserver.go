package main

import (
	"log/slog"
	"net/http"
	"time"
)

// httpLimits bound how long, and how much of, a listener one client can hold.
//
// readHeader and maxHeaderBytes bound a request's head: a client that sends its headers slowly,
// or too many of them, is cut off (431 for too many), as any front proxy would. read bounds the
// whole request, body included, from its first byte: a 4 MiB body (the default --max-body-bytes)
// needs about 140 KB/s to arrive in time; a client that stops sending gets 408 and the
// connection is closed. write bounds an ordinary request from its headers to the end of its
// answer: handlers take milliseconds, and at most about two seconds while the database is
// unreachable (they then answer 503), so a minute is only ever reached by a client that does not
// read its answer. Long polls (claims wait up to 60 s) and event streams outlast it: their
// handlers move the write deadline themselves (api's holdOpen), so this bound does not cut them.
// idle bounds how long a kept-alive connection may sit between requests: two minutes, more than
// the pause between a worker's long polls or its heartbeats.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

// defaultHTTPLimits are both listeners' limits.
var defaultHTTPLimits = httpLimits{
	readHeader:     10 * time.Second,
	read:           30 * time.Second,
	write:          time.Minute,
	idle:           2 * time.Minute,
	maxHeaderBytes: 64 << 10, // net/http's default is 1 MiB; a JWT and a browser's headers need a few KiB
}

// newHTTPServer is a listener's server with the limits.
func newHTTPServer(h http.Handler, lim httpLimits, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    lim.maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
