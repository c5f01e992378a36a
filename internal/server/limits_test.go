package server

import (
	"log/slog"
	"net/http"
	"testing"
	"time"
)

func TestDefaultHTTPLimits(t *testing.T) {
	srv := newHTTPServer(http.NotFoundHandler(), DefaultHTTPLimits, slog.New(slog.DiscardHandler))
	if srv.ReadHeaderTimeout != 10*time.Second || srv.ReadTimeout != 30*time.Second || srv.WriteTimeout != time.Minute ||
		srv.IdleTimeout != 2*time.Minute || srv.MaxHeaderBytes != 64<<10 {
		t.Fatalf("listener limits: header %s, read %s, write %s, idle %s, max header bytes %d",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	// A read timeout above the write timeout could not answer a body that came too slowly.
	if srv.ReadTimeout >= srv.WriteTimeout {
		t.Fatal("the read timeout must be below the write timeout")
	}
}
