package architecture

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/baton-dev/baton/"

// The server's own packages: a worker or a producer's program never needs them.
var server = []string{"internal/store", "internal/dispatch", "internal/dataplane", "internal/api", "internal/auth", "internal/grant",
	"internal/maintenance", "internal/ui", "internal/sink", "internal/dataset", "internal/metrics"}

// rules: what each package must not link, directly or through another package, and why. An entry
// "-P" allows package P (which has a rule of its own) where another entry would forbid it.
var rules = []struct {
	pkg       string
	forbidden []string
	why       string
}{
	{"worker", server, "the worker SDK is linked into every user's worker binary: it carries wire shapes and a client, never the server"},
	{"client", server, "the producer client is linked into users' programs: it carries wire shapes and a client, never the server"},
	{"internal/ctl", server, "baton job, pipeline and dataset are a client of the producer API: they speak to it through the public client package only, never the server"},
	{"internal/wrapper", server, "the exec wrapper (baton worker --exec) runs on worker hosts beside untrusted children: it is built on the worker SDK and links nothing of the server"},
	{"internal/runner", []string{"internal/", "-internal/sandbox", "worker", "client", "wire"}, "the runner only runs a process (for the exec wrapper, bench and chaos), contained by the sandbox: it depends on nothing else of Baton's"},
	{"internal/sandbox", []string{"internal/", "worker", "client", "wire"}, "the sandbox only contains a process (the query engine's workers, untrusted programs): it depends on nothing of Baton's"},
	{"internal/secrets", []string{"internal/", "worker", "client", "wire"}, "secrets reads secrets' values from their providers and redacts them from logs, for the server and for processes beside it alike: it depends on nothing of Baton's"},
	{"internal/bundle", []string{"internal/", "worker", "client", "wire"}, "the bundle format is checked where bundles are uploaded and run where they are cached, by the server and by workers alike: it depends on nothing of Baton's"},
	{"internal/udf", []string{"internal/api", "internal/ui", "internal/dataplane", "internal/dispatch", "internal/wrapper", "worker"}, "the bundle registry keeps bundles' records and archives for the API and the data plane's deploys: it lies below both, and runs nothing"},
	{"internal/sink", without(server, "internal/dataset", "internal/sink"), "the sink is its own process (baton sink): it speaks the Buffer Queue's wire shapes to a server and loads the data database, and links nothing of the server"},
	{"wire", []string{"internal/"}, "the wire shapes are public and shared by the server, the SDK, the client and the sink"},
	{"internal/lifecycle", []string{"internal/store", "internal/dispatch"}, "the lifecycle rules are pure functions"},
	{"internal/report", []string{"internal/"}, "what a worker reports of its data is a plain record, shared by the lifecycle core that receives it and the data plane that stores it"},
	{"internal/store", []string{"internal/dispatch", "internal/api", "internal/maintenance"}, "the store is the seam below the core, not above it"},
	{"internal/store/sqldb/sqltext", []string{"internal/", "wire"}, "sqltext builds SQL text and arguments alone: what knows the store's records stays in sqldb"},
	{"internal/service", []string{"internal/"}, "the service contract depends on nothing of Baton's"},
	{"internal/backup", []string{"internal/dispatch", "internal/dataplane", "internal/api", "internal/server"},
		"backup copies and installs a data directory's database files: it works on files through the SQLite driver, never through the server above the store"},
	{"internal/pushsig", []string{"internal/store", "internal/auth"}, "the SDK verifies push signatures with it"},
	{"internal/mtls", []string{"internal/store", "internal/auth"}, "the SDK dials the internal listener with it"},
	{"internal/maintenance", []string{"internal/dispatch", "internal/api", "internal/ui", "internal/sink"}, "maintenance runs over the store, a clock and a logger only"},
	{"internal/dispatch", []string{"internal/dataplane", "internal/pipeline", "internal/dataset", "internal/api", "internal/ui", "internal/sink", "internal/maintenance", "internal/server"},
		"the lifecycle core is below the data plane, its adapters and the services beside it: the data plane takes part in its transitions through dispatch.Hook"},
	{"internal/dataplane", []string{"internal/api", "internal/ui", "internal/sink", "internal/maintenance", "internal/server"}, "the data plane is below the adapters that serve it"},
	{"internal/dataplane/reads", []string{"=internal/dataplane", "internal/api", "internal/ui", "internal/server", "internal/sink", "internal/maintenance"},
		"reads answers reads of datasets over the store, the data database and the query engine it is handed: below the data plane's deploys and routing"},
	{"internal/dataplane/bufferqueue", []string{"=internal/dataplane", "internal/api", "internal/ui", "internal/server", "internal/sink", "internal/maintenance"},
		"the Buffer Queue is below the data plane's deploys and routing, and below the sink and the adapters that serve it"},
	{"internal/scope", []string{"internal/dataplane", "internal/api", "internal/ui", "internal/server", "internal/capability"},
		"what an attempt may touch is decided below everything that enforces it or mints tokens of it"},
	{"internal/dataplane/specs", []string{"=internal/dataplane", "internal/api", "internal/ui", "internal/server", "internal/sink", "internal/maintenance"},
		"a deployed version's spec is read by routing, sources and builds: it lies below them"},
	{"internal/dataplane/intake", []string{"=internal/dataplane", "internal/api", "internal/ui", "internal/server", "internal/sink", "internal/maintenance"},
		"intake is the lifecycle core's hook for what workers report of their data: below the data plane's deploys, routing and sources, which read what it stored"},
	{"internal/dataplane/staging", []string{"=internal/dataplane", "internal/dispatch", "internal/api", "internal/ui", "internal/server"},
		"the staging collector works over the store, the object storage and a service.Env, and the data plane hands it the replace outputs: it links neither the data plane nor what lies above the store"},
	{"internal/api", []string{"internal/maintenance", "internal/server", "internal/push"},
		"api holds the HTTP adapters only: it answers requests and runs no loop of its own (push delivery is internal/push; loops are composed by internal/server)"},
	{"internal/api/codec", []string{"=internal/api", "=internal/dataplane", "internal/server", "internal/ui", "internal/push", "internal/maintenance"},
		"the dialects' wire shapes are read and named below their handlers, without the handlers or what they call"},
	{"internal/assignment", []string{"internal/api", "internal/ui", "internal/server", "internal/dataplane"}, "a claim is rendered from what the core hands out, by every dialect alike"},
	{"internal/ui", []string{"internal/api", "internal/server"}, "the dashboard is one of the handlers a server composes"},
	{"internal/server", []string{"internal/demo", "internal/wrapper"}, "a server is composed of its own packages: the demo (baton dev --demo) and the exec wrapper (baton worker --exec) are programs beside it, which cmd/baton starts"},
	{"internal/request", server, "request is plumbing below the adapters: it reads and checks HTTP requests, whoever serves them"},
	{"internal/capability", []string{"internal/api", "internal/ui", "internal/server", "internal/push", "internal/maintenance", "internal/sink", "internal/dataplane"},
		"capability tokens are minted and checked below the dialects that hand them out and the push deliverer"},
	{"internal/sse", server, "an event stream follows any log it is handed, below the adapters that hand it one"},
	{"internal/cors", server, "the CORS policy is plumbing below the adapters: it wraps a listener's handler, whatever it serves"},
	{"internal/query", []string{"internal/", "wire"}, "the Query Service's contract depends on nothing of Baton's: the data plane speaks it, the engine implements it"},
	{"internal/query/engine", server, "the query engine runs SQL over the relations it is handed, and links nothing of the server that resolves them"},
	{"internal/query/gate", append(slices.Clone(server), "internal/query/engine"), "the gate judges SQL text alone: it links nothing of the server, nor the engine that runs what it lets through"},
	// DuckDB is a large cgo library: only the program that serves queries links it.
	{"internal/dataplane", []string{"internal/query/engine"}, "the data plane is handed a query engine (dataplane.Config.Query); it never links DuckDB itself"},
	{"internal/api", []string{"internal/query/engine"}, "the adapters answer queries through the data plane; they never link DuckDB"},
	{"internal/server", []string{"internal/query/engine"}, "cmd/baton opens the query engine and hands it to the server, so that the many tests that start a server do not link DuckDB"},
}

// without returns list less the given packages.
func without(list []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(p string) bool { return slices.Contains(drop, p) })
}

// TestPackageBoundaries fails when a package links one its rule forbids, naming the chain of
// imports that does it.
func TestPackageBoundaries(t *testing.T) {
	imports := goList(t)
	for _, r := range rules {
		if _, ok := imports[r.pkg]; !ok {
			t.Errorf("rule for %s: no such package", r.pkg)
			continue
		}
		graph := imports
		for _, f := range r.forbidden {
			if allowed, ok := strings.CutPrefix(f, "-"); ok {
				graph = withoutImport(graph, allowed)
			}
		}
		for _, f := range r.forbidden {
			if strings.HasPrefix(f, "-") {
				continue
			}
			if path := importPath(graph, r.pkg, f); path != nil {
				t.Errorf("%s links %s (%s): %s", r.pkg, f, strings.Join(path, " → "), r.why)
			}
		}
	}
}

// withoutImport returns imports less every import of pkg.
func withoutImport(imports map[string][]string, pkg string) map[string][]string {
	out := make(map[string][]string, len(imports))
	for p, imps := range imports {
		out[p] = slices.DeleteFunc(slices.Clone(imps), func(i string) bool { return i == pkg })
	}
	return out
}

// goList returns every package of the module with the module's packages it imports directly
// (tests excluded), by path relative to the module.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`+"\n"+`{{.Dir}}{{range .GoFiles}} {{$.Dir}}/{{.}}{{end}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if !sc.Scan() {
			t.Fatalf("go list: no files line after %q", fields)
		}
		// Read every package's folder and source files, so that go test's cache knows this result
		// depends on them (it cannot see what the go list child read) and runs the test again when
		// a file or an import changes.
		files := strings.Fields(sc.Text())
		if len(files) > 0 {
			if _, err := os.ReadDir(files[0]); err != nil {
				t.Fatal(err)
			}
			for _, file := range files[1:] {
				if _, err := os.ReadFile(file); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(fields[0], module)
		imports[pkg] = nil
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	return imports
}

// importPath returns a chain of imports from pkg to a package that is forbidden or lies under
// it (forbidden ending in "/" names every package under that folder; starting with "=", that
// package alone, not those under it), or nil if there is none.
func importPath(imports map[string][]string, pkg, forbidden string) []string {
	matches := func(p string) bool {
		if exact, ok := strings.CutPrefix(forbidden, "="); ok {
			return p == exact
		}
		if strings.HasSuffix(forbidden, "/") {
			return strings.HasPrefix(p, forbidden)
		}
		return p == forbidden || strings.HasPrefix(p, forbidden+"/")
	}
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, next := range imports[p] {
			if _, seen := prev[next]; seen {
				continue
			}
			prev[next] = p
			if matches(next) {
				path := []string{next}
				for at := p; at != ""; at = prev[at] {
					path = append(path, at)
				}
				slices.Reverse(path)
				return path
			}
			queue = append(queue, next)
		}
	}
	return nil
}

// The rules' own check: a chain is found through an intermediate package, and only then.
func TestImportPath(t *testing.T) {
	imports := map[string][]string{"a": {"b"}, "b": {"internal/c/d"}, "internal/c/d": nil, "e": nil}
	if got := importPath(imports, "a", "internal/c"); !slices.Equal(got, []string{"a", "b", "internal/c/d"}) {
		t.Errorf("a → internal/c: %v", got)
	}
	if got := importPath(imports, "a", "internal/"); got == nil {
		t.Error("a → internal/: not found")
	}
	if got := importPath(imports, "e", "internal/c"); got != nil {
		t.Errorf("e → internal/c: %v, want none", got)
	}
	if got := importPath(imports, "a", "internal/c/dd"); got != nil {
		t.Errorf("a → internal/c/dd: %v, want none", got)
	}
}

// outbound are the calls that send an HTTP request.
var outbound = []string{"http.Client", "http.NewRequest", "http.DefaultClient", "http.Get(", "http.Post(", "http.Head("}

// TestAPIHasNoOutboundRuntime fails when the HTTP adapters send requests of their own: what goes
// out of the server (push delivery) lives in its own package, started by internal/server.
func TestAPIHasNoOutboundRuntime(t *testing.T) {
	files, err := filepath.Glob("../api/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no api sources: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, call := range outbound {
				if strings.Contains(line, call) {
					t.Errorf("%s:%d uses %s: api answers requests and sends none (see internal/push)", filepath.Base(f), i+1, call)
				}
			}
		}
	}
}
