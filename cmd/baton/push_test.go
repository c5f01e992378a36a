package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/worker"
)

// writeSecret writes content to a file of its own and returns the file's path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPushSecretMapReadsLiteralsAndFiles(t *testing.T) {
	t.Parallel()
	f := serverFlags{pushSecrets: listFlag{
		"a=literal-secret",
		"b=@" + writeSecret(t, "from-a-file\n"),
		"c=@" + writeSecret(t, "crlf-file\r\n"),
		"d=@" + writeSecret(t, "no-newline"),
		"e=with=equals",
	}}
	targets := map[string]string{"a": "", "b": "", "c": "", "d": "", "e": "", "unsigned": ""}
	got, err := f.pushSecretMap(targets)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "literal-secret", "b": "from-a-file", "c": "crlf-file", "d": "no-newline", "e": "with=equals"}
	if len(got) != len(want) {
		t.Fatalf("secrets %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("secret of %s = %q, want %q", k, got[k], v)
		}
	}
}

// A bad --push-secret stops `baton dev` and `baton server` before they serve, with a message that
// names the flag and never repeats the secret.
func TestPushSecretFlagErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope")
	for _, c := range []struct {
		name   string
		secret []string // --push-secret values; the target is work=...
		want   string
	}{
		{"no target for the name", []string{"other=s3cret-value"}, `task name "other" has no --push-target other=URL`},
		{"no name", []string{"=s3cret-value"}, "want NAME=SECRET or NAME=@FILE"},
		{"no equals sign", []string{"s3cret-value"}, "want NAME=SECRET or NAME=@FILE"},
		{"empty secret", []string{"work="}, "--push-secret work: the secret is empty"},
		{"name given twice", []string{"work=s3cret-value", "work=s3cret-value-2"}, `task name "work" given twice`},
		{"space in the secret", []string{"work=s3cret value"}, "printable ASCII without spaces"},
		{"unreadable file", []string{"work=@" + missing}, "--push-secret work: read the secret: open " + missing},
		{"empty file", []string{"work=@" + writeSecret(t, "")}, "the secret is empty"},
		{"file of a newline", []string{"work=@" + writeSecret(t, "\n")}, "the secret is empty"},
		{"file of two lines", []string{"work=@" + writeSecret(t, "s3cret-value\nmore\n")}, "printable ASCII without spaces"},
	} {
		for _, cmd := range []string{"dev", "server"} {
			t.Run(cmd+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				args := []string{cmd, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0", "--push-target", "work=http://127.0.0.1:1/run"}
				if cmd == "dev" {
					args = append(args, "--data-dir", t.TempDir(), "--metrics-listen=")
				} else {
					args = append(args, "--internal-insecure", "--database-url", unusedDatabaseURL)
				}
				for _, s := range c.secret {
					args = append(args, "--push-secret", s)
				}
				code, stdout, stderr := runBaton(t, args...)
				if code == 0 || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "Press Ctrl-C") {
					t.Fatalf("exit %d, want an error saying %q before serving; stdout:\n%s\nstderr:\n%s", code, c.want, stdout, stderr)
				}
				if strings.Contains(stderr, "s3cret") {
					t.Errorf("the message repeats the secret:\n%s", stderr)
				}
				if cmd == "server" && strings.Contains(stderr, "postgres") {
					t.Errorf("the database was tried before the flags were checked:\n%s", stderr)
				}
			})
		}
	}
}

var producerAPILine = regexp.MustCompile(`producer API\s+(http://\S+)`)

// `baton dev --push-secret` reaches the push dispatcher: a target that takes only deliveries
// signed with the secret in the file takes the task. Not parallel: it sets BATON_API_KEY.
func TestDevSignsPushDeliveriesWithTheSecretFile(t *testing.T) {
	const secret, key = "whsec-dev-test", "push-secret-test-key"
	t.Setenv("BATON_API_KEY", key)
	taken, refused := make(chan string, 8), make(chan string, 8)
	guard := worker.PushAuth(secret, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		taken <- string(b)
		w.WriteHeader(http.StatusAccepted)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		guard.ServeHTTP(rec, r)
		if rec.Code != http.StatusAccepted {
			refused <- fmt.Sprintf("%d %s", rec.Code, rec.Body)
		}
		w.WriteHeader(rec.Code)
	}))
	defer srv.Close()

	banner := startDev(t, "--push-target", "work="+srv.URL+"/run", "--push-secret", "work=@"+writeSecret(t, secret+"\n"))
	m := producerAPILine.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no producer API in the banner:\n%s", banner)
	}
	p := producer{t: t, url: m[1], key: key}
	code, body := p.call("POST", "/jobs", `{"tasks":[{"taskId":"a","name":"work","runtime":"push","dependsOn":[]}]}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /jobs: %d %v", code, body)
	}
	select {
	case env := <-taken:
		if !strings.Contains(env, `"taskKey":"a"`) {
			t.Fatalf("the target took %s, want task a's envelope", env)
		}
	case why := <-refused:
		t.Fatalf("the target refused Baton's delivery: %s", why)
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20 s")
	}
}
