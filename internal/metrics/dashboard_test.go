package metrics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// templateVar is a variable of a Grafana dashboard.
type templateVar struct {
	Name, Type string
	Query      json.RawMessage
}

// TestDashboardUsesExportedMetrics reads the Grafana dashboard and checks that it is valid JSON
// with a Prometheus datasource variable and that every metric its queries name is one the
// registry exports.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/baton.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []templateVar `json:"list"`
		} `json:"templating"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/baton.json is not valid JSON: %v", err)
	}
	if !slices.ContainsFunc(dash.Templating.List, func(v templateVar) bool {
		return v.Type == "datasource" && string(v.Query) == `"prometheus"` && v.Name == "datasource"
	}) {
		t.Error("the dashboard has no Prometheus datasource variable named datasource")
	}
	// Every family exists once each collector has a series.
	m := metrics.New()
	st := storetest.OpenSQLite(t)
	d, err := dispatch.New(st, dispatch.Config{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateJob(context.Background(), dispatch.CreateJobParams{Tenant: "acme", Tasks: []lifecycle.TaskSpec{{Key: "a", Name: "q"}}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	m.Instrument("public", http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	exported := families(t, m.Registry())

	exprs := regexp.MustCompile(`"expr":\s*"((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(string(raw), -1)
	if len(exprs) < 15 {
		t.Fatalf("the dashboard has %d queries; want one per panel at least", len(exprs))
	}
	name := regexp.MustCompile(`\b((?:baton|go|process)_[a-zA-Z0-9_]+)\b`)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range name.FindAllString(e[1], -1) {
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && exported[b].GetType() == dto.MetricType_HISTOGRAM {
					base = b
				}
			}
			if exported[base] == nil {
				t.Errorf("the dashboard queries %s, which the server does not export (query: %s)", n, e[1])
			}
			used[base] = true
		}
	}
	for _, want := range []string{"baton_transitions_total", "baton_claim_wait_seconds", "baton_task_handoff_seconds", "baton_tasks",
		"baton_commit_batch_transitions", "baton_commit_duration_seconds", "baton_outbox_unsent_messages", "baton_http_requests_total",
		"baton_http_request_duration_seconds", "baton_credentials_rejected_total", "baton_task_dead_letters_total"} {
		if !used[want] {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
}
