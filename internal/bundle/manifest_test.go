package bundle

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestPathProblemKeepsNamesInsideTheBundle(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, want string }{
		{"main.py", ""},
		{"pkg/sub/mod.py", ""},
		{"dots..in.name", ""},
		{"..", "zip-slip"},
		{"../evil", "zip-slip"},
		{"a/../../evil", "zip-slip"},
		{"a/..", "zip-slip"},
		{"/etc/x", "absolute"},
		{`a\b`, "backslash"},
		{`..\evil`, "backslash"},
		{"a\x00b", "control character"},
		{"a\nb", "control character"},
		{"a\x7fb", "control character"},
		{"\xff.py", "UTF-8"},
		{"", "empty name"},
		{"a//b", "empty folder name"},
		{"a/", "empty folder name"},
		{"./a", `"."`},
		{"a/./b", `"."`},
		{strings.Repeat("a", MaxPath), ""},
		{strings.Repeat("a", MaxPath+1), "at most 1024"},
	} {
		got := pathProblem(c.path)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("pathProblem(%q) = %q; want %q", c.path, got, c.want)
		}
	}
}

func TestDecodeManifest(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("a", 64)
	file := func(p string) string { return fmt.Sprintf(`{"path":%q,"sha256":%q,"bytes":1}`, p, h) }
	doc := func(members string) string { return `{"schema_version":1,` + members + `}` }
	for _, c := range []struct {
		name, doc  string
		path, want string // the refusal; "" for none
	}{
		{"python", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `]`), "", ""},
		{"env allowlist", doc(`"runtime":"node","entrypoint":"i.js","files":[` + file("i.js") + `],"env_allowlist":["LOG_LEVEL","_x9"]`), "", ""},
		{"unknown member", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `],"extra":1`), ManifestName, `unknown field "extra"`},
		{"unknown member of a file", doc(`"runtime":"python","entrypoint":"main.py","files":[{"path":"main.py","sha256":"` + h + `","bytes":1,"mode":7}]`),
			ManifestName, `unknown field "mode"`},
		{"trailing data", doc(`"runtime":"python","entrypoint":"main.py","files":[`+file("main.py")+`]`) + ` {}`, ManifestName, "more after its JSON object"},
		{"trailing garbage", doc(`"runtime":"python","entrypoint":"main.py","files":[`+file("main.py")+`]`) + `x`, ManifestName, "more after its JSON object"},
		{"not JSON", `{"schema_version":`, ManifestName, "cut short"},
		{"not an object", `[1]`, ManifestName, "must be a JSON object"},
		{"wrong type", doc(`"runtime":"python","entrypoint":"main.py","files":[{"path":"main.py","sha256":"` + h + `","bytes":"1"}]`), ManifestName, "member files.bytes must be an integer, not string"},
		{"schema version 2", `{"schema_version":2,"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `]}`, "schema_version", "schema version 1 only"},
		{"no schema version", `{"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `]}`, "schema_version", "is missing"},
		{"runtime java", doc(`"runtime":"java","entrypoint":"main.py","files":[` + file("main.py") + `]`), "runtime", `"java" is not a runtime`},
		{"no runtime", doc(`"entrypoint":"main.py","files":[` + file("main.py") + `]`), "runtime", "is missing"},
		{"python without entrypoint", doc(`"runtime":"python","files":[` + file("main.py") + `]`), "entrypoint", "is missing"},
		{"entrypoint not declared", doc(`"runtime":"python","entrypoint":"app.py","files":[` + file("main.py") + `]`), "entrypoint", `"app.py" is not one of the files`},
		{"entrypoint climbs out", doc(`"runtime":"python","entrypoint":"../x.py","files":[` + file("main.py") + `]`), "entrypoint", "zip-slip"},
		{"no files", doc(`"runtime":"python","entrypoint":"main.py","files":[]`), "files", "is empty"},
		{"file path zip-slip", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `,` + file("../evil") + `]`), "files[1].path", "zip-slip"},
		{"file path absolute", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `,` + file("/etc/x") + `]`), "files[1].path", "absolute"},
		{"file named like the manifest", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `,` + file(ManifestName) + `]`), "files[1].path", "names the manifest itself"},
		{"file listed twice", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `,` + file("main.py") + `]`), "files[1].path", "listed twice"},
		{"file and folder", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `,` + file("lib") + `,` + file("lib/x.py") + `]`), "files[2].path", `which is listed as a file`},
		{"bad hash", doc(`"runtime":"python","entrypoint":"main.py","files":[{"path":"main.py","sha256":"` + strings.ToUpper(h) + `","bytes":1}]`), "files[0].sha256", "64 lowercase"},
		{"negative size", doc(`"runtime":"python","entrypoint":"main.py","files":[{"path":"main.py","sha256":"` + h + `","bytes":-1}]`), "files[0].bytes", "negative"},
		{"bad env name", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `],"env_allowlist":["9LIVES"]`), "env_allowlist[0]", "not an environment variable name"},
		{"env name with =", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `],"env_allowlist":["A=B"]`), "env_allowlist[0]", "not an environment variable name"},
		{"env name twice", doc(`"runtime":"python","entrypoint":"main.py","files":[` + file("main.py") + `],"env_allowlist":["A","A"]`), "env_allowlist[1]", "listed twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeManifest([]byte(c.doc))
			if c.want == "" {
				if err != nil {
					t.Fatalf("DecodeManifest: %v", err)
				}
				if m == nil {
					t.Fatal("no manifest")
				}
				return
			}
			wantRefusal(t, err, c.path, c.want)
		})
	}
}

func TestDecodeManifestNormalisesRustAndDefaultsBootstrap(t *testing.T) {
	t.Parallel()
	b, _ := json.Marshal(manifestOf("rust", "", fileOf("bootstrap", []byte("ELF"))))
	m, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Runtime != Binary || m.Entrypoint != DefaultBinaryEntrypoint {
		t.Errorf("runtime %q, entrypoint %q; want binary, bootstrap", m.Runtime, m.Entrypoint)
	}

	b, _ = json.Marshal(manifestOf(Binary, "", fileOf("server", []byte("ELF"))))
	_, err = DecodeManifest(b)
	wantRefusal(t, err, "entrypoint", `"bootstrap" is not one of the files`)
}

func TestDecodeManifestListsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := DecodeManifest([]byte(`{"schema_version":2,"runtime":"java","entrypoint":"x","files":[{"path":"../a","sha256":"","bytes":-1}]}`))
	got := refusals(t, err)
	want := []string{"schema_version", "runtime", "files[0].path", "files[0].sha256", "files[0].bytes", "entrypoint"}
	if len(got) != len(want) {
		t.Fatalf("%d refusals (%v); want %d", len(got), err, len(want))
	}
	for i, e := range got {
		if e.Path != want[i] {
			t.Errorf("refusal %d is of %q; want %q", i, e.Path, want[i])
		}
	}
}

func TestDecodeManifestLimitsTheEnvAllowlistAndItsOwnSize(t *testing.T) {
	t.Parallel()
	m := manifestOf(Python, "main.py", fileOf("main.py", nil))
	for i := range MaxEnvAllowlist + 1 {
		m.EnvAllowlist = append(m.EnvAllowlist, fmt.Sprintf("V%d", i))
	}
	b, _ := json.Marshal(m)
	_, err := DecodeManifest(b)
	wantRefusal(t, err, "env_allowlist", "at most 64")

	_, err = DecodeManifest(make([]byte, MaxManifest+1))
	wantRefusal(t, err, ManifestName, "at most 1048576")
}

func TestErrorQuotesHostileNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{Path: "main.py", Reason: "is bad"}, "bundle: main.py: is bad"},
		{Error{Path: "a\nb", Reason: "is bad"}, `bundle: "a\nb": is bad`},
		{Error{Path: "a b", Reason: "is bad"}, `bundle: "a b": is bad`},
		{Error{Reason: "the archive is bad"}, "bundle: the archive is bad"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q; want %q", got, c.want)
		}
	}
}
