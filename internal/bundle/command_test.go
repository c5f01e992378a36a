package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEntryFile(t *testing.T) {
	t.Parallel()
	python := manifestOf(Python, "main.py", fileOf("main.py", nil), fileOf("app.py", nil), fileOf("pkg/trace.py", nil), fileOf("data.json", nil))
	node := manifestOf(Node, "index.js", fileOf("index.js", nil), fileOf("lib/async.mjs", nil), fileOf("lib/c.cjs", nil), fileOf("lib/c.mjs", nil))
	binary := manifestOf(Binary, "bootstrap", fileOf("bootstrap", nil), fileOf("tool", nil))
	for _, c := range []struct {
		m                      *Manifest
		entrypoint             string
		file, handler, errWant string
	}{
		{python, "", "main.py", "", ""},
		{python, "app.py", "app.py", "", ""},
		{python, "data.json", "data.json", "", ""},
		{python, "app.handler", "app.py", "handler", ""},
		{python, "pkg/trace.handler", "pkg/trace.py", "handler", ""},
		{python, "pkg.trace.handler", "pkg/trace.py", "handler", ""},
		{python, "missing.handler", "", "", "looked for missing.py"},
		{python, "app.2x", "", "", "neither a file of the bundle nor a handler"},
		{python, "app.$h", "", "", "neither a file of the bundle nor a handler"},
		{python, "app", "", "", "neither a file of the bundle nor a handler"},
		{python, "../app.handler", "", "", "neither a file of the bundle nor a handler"},
		{node, "", "index.js", "", ""},
		{node, "index.handler", "index.js", "handler", ""},
		{node, "lib/async.handler", "lib/async.mjs", "handler", ""},
		{node, "lib/c.$h", "lib/c.mjs", "$h", ""}, // .mjs is looked for before .cjs
		{node, "nope.handler", "", "", "looked for nope.js, nope.mjs, nope.cjs"},
		{binary, "", "bootstrap", "", ""},
		{binary, "tool", "tool", "", ""},
		{binary, "bootstrap.handler", "", "", `"bootstrap.handler" is not a file of the bundle`},
	} {
		file, handler, err := c.m.EntryFile(c.entrypoint)
		if c.errWant != "" {
			var e *Error
			if !errors.As(err, &e) || e.Path != "entrypoint" || !strings.Contains(e.Reason, c.errWant) {
				t.Errorf("%s EntryFile(%q) = %q, %q, %v; want an error containing %q", c.m.Runtime, c.entrypoint, file, handler, err, c.errWant)
			}
			continue
		}
		if err != nil || file != c.file || handler != c.handler {
			t.Errorf("%s EntryFile(%q) = %q, %q, %v; want %q, %q", c.m.Runtime, c.entrypoint, file, handler, err, c.file, c.handler)
		}
	}
}

func TestCommandIsAbsolute(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(wd, "b")
	python := manifestOf(Python, "main.py", fileOf("main.py", nil), fileOf("pkg/trace.py", nil))
	node := manifestOf(Node, "index.js", fileOf("index.js", nil))
	binary := manifestOf(Binary, "bootstrap", fileOf("bootstrap", nil))
	for _, c := range []struct {
		m          *Manifest
		entrypoint string
		want       []string
	}{
		{python, "", []string{"python3", abs + "/main.py"}},
		{python, "pkg/trace.handler", []string{"python3", "-c", pythonShim, abs, "pkg.trace", "handler"}},
		{node, "", []string{"node", abs + "/index.js"}},
		{node, "index.handler", []string{"node", "-e", nodeShim, abs + "/index.js", "handler"}},
		{binary, "", []string{abs + "/bootstrap"}},
	} {
		got, err := Command("b", c.m, c.entrypoint)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s Command(%q) = %q, %v; want %q", c.m.Runtime, c.entrypoint, got, err, c.want)
		}
	}
	if _, err := Command("b", python, "nope.handler"); err == nil {
		t.Error("Command of an entrypoint that is not there: no error")
	}
}

// extracted builds files into a bundle and extracts it, as a worker would run it.
func extracted(t *testing.T, runtime, entrypoint string, files map[string]string) (string, *Manifest) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Build(tree(t, files), runtime, entrypoint, nil, &buf); err != nil {
		t.Fatal(err)
	}
	dir, m, err := extract(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// result is what a started bundle did.
type result struct {
	stdout, stderr string
	code           int
}

// last is the last line of stdout.
func (r result) last() string {
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	return lines[len(lines)-1]
}

// start runs the bundle in dir with entrypoint as a worker would (in a work folder of its own,
// the payload on stdin) and waits for it.
func start(t *testing.T, dir string, m *Manifest, entrypoint string, payload any) result {
	t.Helper()
	argv, err := Command(dir, m, entrypoint)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("%s is not installed", argv[0])
	}
	in, _ := json.Marshal(payload)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = t.TempDir()
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func payloadFor(lease time.Time) map[string]any {
	p := map[string]any{"task_id": "t-1", "attempt": 2, "name": "ingest.parse", "input": map[string]any{"k": 1}}
	if !lease.IsZero() {
		p["lease_expires_at"] = lease.Format(time.RFC3339Nano)
	}
	return p
}

// wantHandlerResult checks what the handler that echoes its context returned.
func wantHandlerResult(t *testing.T, r result, maxLeft int64) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	var got struct {
		Input   map[string]int `json:"input"`
		Request string         `json:"request"`
		Name    string         `json:"name"`
		Left    int64          `json:"left"`
	}
	if err := json.Unmarshal([]byte(r.last()), &got); err != nil {
		t.Fatalf("last line of stdout %q: %v", r.last(), err)
	}
	if got.Input["k"] != 1 || got.Request != "t-1:2" || got.Name != "ingest.parse" || got.Left <= 0 || got.Left > maxLeft {
		t.Errorf("handler saw %+v", got)
	}
	if !strings.HasPrefix(r.stdout, "log line\n") {
		t.Errorf("stdout %q; want the handler's own line first", r.stdout)
	}
	if strings.Contains(r.stdout, "late") {
		t.Errorf("stdout %q: the handler printed after its result", r.stdout)
	}
}

func TestPythonHandlers(t *testing.T) {
	t.Parallel()
	dir, m := extracted(t, Python, "main.py", map[string]string{
		"main.py": "print('{\"program\": true}')\n",
		"app.py": `import atexit, asyncio, datetime

def handler(event, context):
    print("log line")
    atexit.register(lambda: print("late"))
    return {"input": event["input"], "request": context.aws_request_id, "name": context.function_name,
            "left": context.get_remaining_time_in_millis()}

def nothing(event, context):
    return None

def dates(event, context):
    return {"day": datetime.date(2020, 1, 2)}

async def later(event, context):
    await asyncio.sleep(0)
    return {"async": True}

def boom(event, context):
    raise ValueError("no good")
`,
		"pkg/trace.py":  "from .helper import value\n\ndef handler(event, context):\n    return value\n",
		"pkg/helper.py": "value = 'from a package'\n",
	})

	t.Run("program", func(t *testing.T) {
		t.Parallel()
		r := start(t, dir, m, "", payloadFor(time.Time{}))
		if r.code != 0 || r.last() != `{"program": true}` {
			t.Errorf("%+v", r)
		}
	})
	t.Run("sync with a lease", func(t *testing.T) {
		t.Parallel()
		wantHandlerResult(t, start(t, dir, m, "app.handler", payloadFor(time.Now().Add(time.Minute))), 60_000)
	})
	t.Run("sync without a lease", func(t *testing.T) {
		t.Parallel()
		wantHandlerResult(t, start(t, dir, m, "app.handler", payloadFor(time.Time{})), 2147483647)
	})
	for _, c := range []struct{ name, entrypoint, want string }{
		{"None", "app.nothing", "null"},
		{"not JSON by itself", "app.dates", `{"day": "2020-01-02"}`},
		{"async", "app.later", `{"async": true}`},
		{"in a package", "pkg/trace.handler", `"from a package"`},
		{"dotted", "pkg.trace.handler", `"from a package"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := start(t, dir, m, c.entrypoint, payloadFor(time.Time{}))
			if r.code != 0 || r.stdout != c.want+"\n" {
				t.Errorf("stdout %q, exit %d; want %q\nstderr:\n%s", r.stdout, r.code, c.want, r.stderr)
			}
		})
	}
	t.Run("raises", func(t *testing.T) {
		t.Parallel()
		r := start(t, dir, m, "app.boom", payloadFor(time.Time{}))
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "Traceback") || !strings.Contains(r.stderr, "ValueError: no good") {
			t.Errorf("%+v", r)
		}
	})
}

func TestNodeHandlers(t *testing.T) {
	t.Parallel()
	dir, m := extracted(t, Node, "main.js", map[string]string{
		"main.js": "console.log(JSON.stringify({program: true}))\n",
		"index.js": `exports.handler = (event, context) => {
  console.log('log line');
  setTimeout(() => console.log('late'), 0);
  process.on('exit', () => console.log('late'));
  return {input: event.input, request: context.awsRequestId, name: context.functionName, left: context.getRemainingTimeInMillis()};
};
exports.nothing = () => undefined;
exports.callback = (event, context, callback) => { setTimeout(() => callback(null, {callback: true}), 1); };
exports.callbackError = (event, context, callback) => callback(new Error('callback failed'));
exports.boom = () => { throw new Error('no good'); };
`,
		"lib/later.mjs":  "export async function handler(event, context) {\n  await new Promise((r) => setTimeout(r, 1));\n  return {async: true};\n}\n",
		"lib/reject.mjs": "export async function handler() {\n  throw new TypeError('rejected');\n}\n",
	})

	t.Run("program", func(t *testing.T) {
		t.Parallel()
		r := start(t, dir, m, "", payloadFor(time.Time{}))
		if r.code != 0 || r.last() != `{"program":true}` {
			t.Errorf("%+v", r)
		}
	})
	t.Run("sync with a lease", func(t *testing.T) {
		t.Parallel()
		wantHandlerResult(t, start(t, dir, m, "index.handler", payloadFor(time.Now().Add(time.Minute))), 60_000)
	})
	t.Run("sync without a lease", func(t *testing.T) {
		t.Parallel()
		wantHandlerResult(t, start(t, dir, m, "index.handler", payloadFor(time.Time{})), 2147483647)
	})
	for _, c := range []struct{ name, entrypoint, want string }{
		{"undefined", "index.nothing", "null"},
		{"callback", "index.callback", `{"callback":true}`},
		{"async module", "lib/later.handler", `{"async":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := start(t, dir, m, c.entrypoint, payloadFor(time.Time{}))
			if r.code != 0 || r.stdout != c.want+"\n" {
				t.Errorf("stdout %q, exit %d; want %q\nstderr:\n%s", r.stdout, r.code, c.want, r.stderr)
			}
		})
	}
	for _, c := range []struct{ name, entrypoint, want string }{
		{"throws", "index.boom", "Error: no good"},
		{"rejects", "lib/reject.handler", "TypeError: rejected"},
		{"calls back with an error", "index.callbackError", "Error: callback failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := start(t, dir, m, c.entrypoint, payloadFor(time.Time{}))
			if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "    at ") {
				t.Errorf("%+v; want exit 1 and a stack with %q", r, c.want)
			}
		})
	}
}

func TestBinaryBundleStarts(t *testing.T) {
	t.Parallel()
	dir, m := extracted(t, Binary, "", map[string]string{"bootstrap": "#!/bin/sh\necho '{\"binary\": 1}'\n"})
	r := start(t, dir, m, "", payloadFor(time.Time{}))
	if r.code != 0 || r.stdout != "{\"binary\": 1}\n" {
		t.Errorf("%+v", r)
	}
}
