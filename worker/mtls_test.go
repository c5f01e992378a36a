package worker_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/worker"
)

func TestWorkerSpeaksMutualTLS(t *testing.T) {
	t.Parallel()
	dc, err := mtls.WriteDevCerts(t.TempDir(), nil, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	s := newServerUnstarted(t)
	if s.internal.TLS, err = mtls.ServerConfig(dc.ServerCert, dc.ServerKey, dc.CA); err != nil {
		t.Fatal(err)
	}
	s.internal.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	s.internal.StartTLS()
	_, ids := s.submit(spec{key: "a", name: "secure"}, spec{key: "b", name: "secure"})

	// Without the client certificate the listener refuses the worker.
	if res, err := http.Post(s.url()+"/internal/worker/claim", "application/json", nil); err == nil {
		res.Body.Close()
		t.Fatal("the internal listener answered a client without a certificate")
	}

	handlers := map[string]worker.Handler{"secure": func(ctx context.Context, tk *worker.Task) (any, error) { return "over mTLS", nil }}
	start(t, s.url(), handlers, worker.WithClientCert(dc.CA, dc.ClientCert, dc.ClientKey))
	// A caller's own HTTP client keeps its settings and gets the certificate added.
	start(t, s.url(), handlers, worker.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}),
		worker.WithClientCert(dc.CA, dc.ClientCert, dc.ClientKey))
	for _, id := range ids {
		if tk := s.waitTask(id, "completed", status(lifecycle.Completed)); string(tk.Output) != `"over mTLS"` {
			t.Errorf("output %s", tk.Output)
		}
	}
}
