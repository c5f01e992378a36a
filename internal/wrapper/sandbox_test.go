package wrapper

import (
	"slices"
	"testing"

	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/worker"
)

// A child may connect to the configured ports, the public URL's, and the object store's when it
// has credentials for one: an S3-compatible server's port, or AWS's https.
func TestChildSandboxGrantsTheServersPorts(t *testing.T) {
	w := New(Config{PublicURL: "http://baton.example:8080", Sandbox: runner.Sandbox{ConnectPorts: []uint16{5432}}})
	for _, c := range []struct {
		creds *worker.Credentials
		want  []uint16
	}{
		{nil, []uint16{5432, 8080}},
		{&worker.Credentials{EndpointURL: "http://minio:9000"}, []uint16{5432, 8080, 9000}},
		{&worker.Credentials{}, []uint16{5432, 8080, 443}},
	} {
		if got := w.childSandbox(w.sandbox, w.publicURLOf(&worker.Task{}), c.creds).ConnectPorts; !slices.Equal(got, c.want) {
			t.Errorf("credentials %+v: ports %v, want %v", c.creds, got, c.want)
		}
	}
	// A pushed task's child reaches the server its delivery names.
	pushed := &worker.Task{PublicURL: "http://callback.example:18300"}
	if got := w.childSandbox(w.sandbox, w.publicURLOf(pushed), nil).ConnectPorts; !slices.Equal(got, []uint16{5432, 18300}) {
		t.Errorf("pushed task: ports %v, want the delivery's server's", got)
	}
	if got := w.sandbox.ConnectPorts; !slices.Equal(got, []uint16{5432}) {
		t.Errorf("the configured ports became %v", got)
	}
	if got := urlPort("https://baton.example"); got != 443 {
		t.Errorf("https without a port: %d, want 443", got)
	}
}
