package api_test

import (
	"os"
	"testing"

	"github.com/baton-dev/baton/internal/store/storetest"
)

// FuzzRowsWhere sends fuzzed where clauses to GET /datasets/{name}/rows of a server over SQLite
// (store and data database) and, when BATON_TEST_POSTGRES_URL is set, of one over PostgreSQL: the
// two stores refuse different inputs (SQLite too many statement parameters, PostgreSQL a NUL), so
// each clause runs on both. No answer may be a 5xx or log an error, every answer must be a JSON
// object (a refusal with an "error"), and both stores must answer a clause alike. Run it with:
//
//	go test -run '^$' -fuzz '^FuzzRowsWhere$' -fuzztime 60s ./internal/api
func FuzzRowsWhere(f *testing.F) {
	servers := map[string]*rowsServer{"sqlite": newRowsServer(f, "sqlite")}
	if os.Getenv(storetest.PostgresURLEnv) != "" {
		servers["postgres"] = newRowsServer(f, "postgres")
	} else {
		f.Logf("%s is not set: the where clauses run on SQLite only (e.g. %s=postgres://postgres@127.0.0.1:5432/test?sslmode=disable)",
			storetest.PostgresURLEnv, storetest.PostgresURLEnv)
	}
	for _, seed := range []string{
		`{"severity":"high"}`,
		`{"severity":["low","medium"],"block":3}`,
		`{"block":9223372036854775807,"dedupe_key":"a1"}`,
		`{"seen_at":"2025-01-15T10:00:00Z"}`,
		`{"block":2.0}`,
		`{"block":1e400}`,
		`{"severity":"high"} x`,
		`{"severity":"low","severity":"high"}`,
		`{"severity":"\u0000"}`,
		`{"severity":"\ud800"}`,
		`{"sev\u0000erity":"high"}`,
		`{"block":` + numbers(1001) + `}`,
		`{"severity":[]}`,
		`{"severity":{"nested":1}}`,
		`[]`,
		`null`,
		``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, where string) {
		status := map[string]int{}
		for name, s := range servers {
			s.log.reset()
			res := s.rows(t, where)
			switch {
			case res.Status >= 500:
				t.Fatalf("%s: where %q: %d %s", name, where, res.Status, res.Raw)
			case res.Status >= 400 && res.Body["error"] == nil:
				t.Fatalf("%s: where %q: %d without an error: %s", name, where, res.Status, res.Raw)
			case res.Status != 200 && res.Status != 400:
				t.Fatalf("%s: where %q: %d %s, want 200 or 400", name, where, res.Status, res.Raw)
			}
			if log := s.log.String(); log != "" {
				t.Fatalf("%s: where %q: the server logged errors:\n%s", name, where, log)
			}
			status[name] = res.Status
		}
		if len(status) == 2 && status["sqlite"] != status["postgres"] {
			t.Fatalf("where %q: SQLite answers %d, PostgreSQL %d", where, status["sqlite"], status["postgres"])
		}
	})
}
