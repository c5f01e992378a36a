package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/wrapper"
)

// configCommands are the commands whose flags the environment and --config also set.
var configCommands = configCommandNames

// envOf is an environment of its own for one test: no test touches the process's.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// configured is a command's flags once its configuration is applied, or how it failed.
type configured struct {
	fs      *flag.FlagSet
	res     *config.Result
	code    int
	stderr  string
	stopped bool // the command stopped where configuration ends, as asked
}

func (c configured) value(name string) string { return c.fs.Lookup(name).Value.String() }

// configure runs `baton <command> args...` in env and stops it once its flags are known.
func configure(t *testing.T, env map[string]string, command string, args ...string) configured {
	t.Helper()
	var c configured
	var stderr syncBuffer
	ctx := withConfigMode(context.Background(), configMode{lookupEnv: envOf(env), inspect: func(fs *flag.FlagSet, res *config.Result) {
		c.fs, c.res, c.stopped = fs, res, true
	}})
	c.code = run(ctx, append([]string{command}, args...), &syncBuffer{}, &stderr)
	c.stderr = stderr.String()
	return c
}

// writeConfig writes a configuration file for one test and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "baton.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigPrecedenceFlagEnvFileDefault(t *testing.T) {
	t.Parallel()
	type layer struct{ flag, env, file string } // file: the YAML text of the value
	for _, tc := range []struct {
		command, name string
		def           string
		layer         layer
		// The effective value with, in turn, the file, the file and the environment, all three.
		fromFile, fromEnv, fromFlag string
	}{
		{command: "server", name: "listen", def: "127.0.0.1:8080",
			layer:    layer{flag: "127.0.0.1:3", env: "127.0.0.1:2", file: "127.0.0.1:1"},
			fromFile: "127.0.0.1:1", fromEnv: "127.0.0.1:2", fromFlag: "127.0.0.1:3"},
		{command: "server", name: "database-url", def: "",
			layer:    layer{flag: "postgres://c/db", env: "postgres://e/db", file: "postgres://f/db"},
			fromFile: "postgres://f/db", fromEnv: "postgres://e/db", fromFlag: "postgres://c/db"},
		{command: "server", name: "max-conns", def: "16",
			layer:    layer{flag: "3", env: "2", file: "1"},
			fromFile: "1", fromEnv: "2", fromFlag: "3"},
		{command: "dev", name: "rate-limit", def: "100",
			layer:    layer{flag: "0.5", env: "1e3", file: "2.5"},
			fromFile: "2.5", fromEnv: "1000", fromFlag: "0.5"},
		{command: "sink", name: "sink-visibility", def: "1m0s",
			layer:    layer{flag: "3s", env: "2m", file: "720h"},
			fromFile: "720h0m0s", fromEnv: "2m0s", fromFlag: "3s"},
		{command: "server", name: "group-commit", def: "true",
			layer:    layer{flag: "true", env: "true", file: "false"},
			fromFile: "false", fromEnv: "true", fromFlag: "true"},
		{command: "server", name: "migrate", def: "false",
			layer:    layer{flag: "false", env: "false", file: "true"},
			fromFile: "true", fromEnv: "false", fromFlag: "false"},
		{command: "worker", name: "task", def: "",
			layer:    layer{flag: "c", env: "e1, e2", file: "[f1, f2, f3]"},
			fromFile: "f1,f2,f3", fromEnv: "e1,e2", fromFlag: "c"},
		{command: "server", name: "push-target", def: "",
			layer:    layer{flag: "c=http://c/", env: "e=http://e/", file: "\n  - f=http://f/\n  - g=http://g/"},
			fromFile: "f=http://f/,g=http://g/", fromEnv: "e=http://e/", fromFlag: "c=http://c/"},
		{command: "worker", name: "log-format", def: "text",
			layer:    layer{flag: "text", env: "json", file: "json"},
			fromFile: "json", fromEnv: "json", fromFlag: "text"},
	} {
		t.Run(tc.command+" "+tc.name, func(t *testing.T) {
			t.Parallel()
			file := writeConfig(t, tc.name+": "+tc.layer.file+"\n")
			env := config.EnvName(tc.name)
			for _, step := range []struct {
				what   string
				env    map[string]string
				args   []string
				want   string
				source config.Source
			}{
				{"default", nil, nil, tc.def, config.Source{Kind: config.FromDefault}},
				{"file", nil, []string{"--config", file}, tc.fromFile, config.Source{Kind: config.FromFile, At: file + ":1"}},
				{"file named by BATON_CONFIG", map[string]string{config.Env: file}, nil, tc.fromFile, config.Source{Kind: config.FromFile, At: file + ":1"}},
				{"env over file", map[string]string{env: tc.layer.env}, []string{"--config", file}, tc.fromEnv, config.Source{Kind: config.FromEnv, At: env}},
				{"flag over env and file", map[string]string{env: tc.layer.env, config.Env: file}, []string{"--" + tc.name + "=" + tc.layer.flag}, tc.fromFlag, config.Source{Kind: config.FromFlag}},
			} {
				c := configure(t, step.env, tc.command, step.args...)
				if !c.stopped {
					t.Fatalf("%s: exit %d: %s", step.what, c.code, c.stderr)
				}
				if got := c.value(tc.name); got != step.want {
					t.Errorf("%s: --%s = %q, want %q", step.what, tc.name, got, step.want)
				}
				if got := c.res.Sources[tc.name]; got != step.source {
					t.Errorf("%s: source of --%s = %v, want %v", step.what, tc.name, got, step.source)
				}
			}
		})
	}
}

func TestConfigFileNamesAnEmptyFileOrNone(t *testing.T) {
	t.Parallel()
	empty := writeConfig(t, "# nothing set yet\n")
	if c := configure(t, nil, "server", "--config", empty); !c.stopped || c.value("listen") != "127.0.0.1:8080" {
		t.Errorf("an empty file: exit %d, %s", c.code, c.stderr)
	}
	// --config "" on the command line turns off the file BATON_CONFIG names.
	c := configure(t, map[string]string{config.Env: "/nonexistent/baton.yaml"}, "server", "--config=")
	if !c.stopped || c.res.File != "" {
		t.Errorf("--config= with BATON_CONFIG set: exit %d, %s", c.code, c.stderr)
	}
}

func TestConfigFileUnknownKeysAreErrors(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "listen: 127.0.0.1:1\nlistn: 127.0.0.1:2\nmax-con: 3\nfrobnicate: yes\n")
	c := configure(t, nil, "server", "--config", file)
	if c.stopped || c.code != 2 {
		t.Fatalf("exit %d, want 2; stderr: %s", c.code, c.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("baton server: %s:2: unknown key \"listn\" (did you mean \"listen\"?)", file),
		fmt.Sprintf("baton server: %s:3: unknown key \"max-con\" (did you mean \"max-conns\"?)", file),
		fmt.Sprintf("baton server: %s:4: unknown key \"frobnicate\" (not a flag of baton server)", file),
	} {
		if !strings.Contains(c.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, c.stderr)
		}
	}
	if strings.Contains(c.stderr, "internal-listen") {
		t.Errorf("the valid keys are dumped:\n%s", c.stderr)
	}
}

func TestConfigFileIsOneCommandsFlatMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, want string }{
		{"server:\n  listen: 127.0.0.1:1\n", `:1: unknown key "server": a file has no sections per command, its keys are the flags of baton server`},
		{"sink:\n  workers: 2\n", ":2: sink: want a value, not a mapping (one file configures one command"},
		{"config: other.yaml\n", ":1: config: a configuration file cannot name another one"},
		{"- listen\n", ":1: want a mapping of flag names to values"},
		{"listen: a\nlisten: b\n", ":2: listen: given twice (also on line 1)"},
	} {
		c := configure(t, nil, "server", "--config", writeConfig(t, tc.text))
		if c.code != 2 || !strings.Contains(c.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.text, c.code, c.stderr, tc.want)
		}
	}
}

func TestConfigFileWrongTypesAreErrorsWithTheirLines(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, strings.Join([]string{
		"listen: 127.0.0.1:1",
		"max-conns: many",         // 2
		"shutdown-timeout: 5",     // 3: no unit
		"group-commit: yes",       // 4: YAML 1.2 has no yes
		"internal-listen: [a, b]", // 5
		"public-url:",             // 6
		"log-format: xml",         // 7
		"push-target:",            // 8
		"  - a=http://a/",
		"  - {b: c}", // 10
	}, "\n")+"\n")
	c := configure(t, nil, "server", "--config", file)
	if c.code != 2 {
		t.Fatalf("exit %d, want 2; stderr: %s", c.code, c.stderr)
	}
	for _, want := range []string{
		`:2: max-conns: invalid value "many": parse error (want an integer)`,
		`:3: shutdown-timeout: invalid value "5": parse error (want a duration such as 30s, 5m or 720h)`,
		`:4: group-commit: invalid value "yes": parse error (want true or false)`,
		`:5: internal-listen: want one value, not a list (--internal-listen is not repeatable)`,
		`:6: public-url: no value (write "" for an empty one)`,
		`:7: log-format: invalid value "xml": want text or json`,
		`:10: push-target: want a list of values`,
	} {
		if !strings.Contains(c.stderr, file+want) {
			t.Errorf("stderr lacks %q:\n%s", file+want, c.stderr)
		}
	}
}

func TestConfigEnvInvalidValueNamesTheVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		command, name, value, want string
	}{
		{"server", "BATON_MAX_CONNS", "lots", `baton server: env BATON_MAX_CONNS: invalid value "lots" for --max-conns: parse error (want an integer)`},
		{"worker", "BATON_GRACE", "soon", `baton worker: env BATON_GRACE: invalid value "soon" for --grace`},
		{"dev", "BATON_METRICS_LISTEN", "nine", `baton dev: env BATON_METRICS_LISTEN: invalid value "nine" for --metrics-listen: want HOST:PORT`},
		{"sink", "BATON_LOG_FORMAT", "xml", `baton sink: env BATON_LOG_FORMAT: invalid value "xml" for --log-format: want text or json`},
		{"server", "BATON_GROUP_COMMIT", "", `baton server: env BATON_GROUP_COMMIT: invalid value "" for --group-commit`},
	} {
		c := configure(t, map[string]string{tc.name: tc.value}, tc.command)
		if c.code != 2 || !strings.Contains(c.stderr, tc.want) {
			t.Errorf("%s=%q: exit %d, stderr %q; want 2 and %q", tc.name, tc.value, c.code, c.stderr, tc.want)
		}
	}
	// A variable of a flag the command line sets is not read.
	if c := configure(t, map[string]string{"BATON_MAX_CONNS": "lots"}, "server", "--max-conns", "4"); !c.stopped {
		t.Errorf("BATON_MAX_CONNS with --max-conns: exit %d: %s", c.code, c.stderr)
	}
}

func TestConfigMissingFileIsAUsageError(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--config", missing}, "baton server: --config: open " + missing + ": no such file or directory"},
		{map[string]string{config.Env: missing}, nil, "baton server: env BATON_CONFIG: open " + missing + ": no such file or directory"},
	} {
		c := configure(t, tc.env, "server", tc.args...)
		if c.code != 2 || !strings.Contains(c.stderr, tc.want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", c.code, c.stderr, tc.want)
		}
	}
	// The real command stops there too, before it opens anything.
	var stderr syncBuffer
	if code := run(context.Background(), []string{"server", "--config", missing, "--internal-insecure"}, &syncBuffer{}, &stderr); code != 2 {
		t.Errorf("baton server --config MISSING: exit %d, want 2; stderr: %s", code, stderr.String())
	}
}

// sampleValue is a value of flag name that differs from its default and that its Set accepts,
// tried on a fresh flag set of the command.
func sampleValue(t *testing.T, command, name string) string {
	t.Helper()
	var candidates []string
	f := configure(t, nil, command).fs.Lookup(name)
	if g, ok := f.Value.(flag.Getter); ok {
		switch v := g.Get().(type) {
		case bool:
			candidates = []string{strconv.FormatBool(!v)}
		case int, int64, uint, uint64:
			candidates = []string{"7"}
		case float64:
			candidates = []string{"2.5"}
		case time.Duration:
			candidates = []string{"7s"}
		case string:
			candidates = []string{"sample-" + name}
		}
	}
	candidates = append(candidates, "json", "none", "127.0.0.1:9999", "http://127.0.0.1:4318", "pipeline",
		"https://app.example.com", "acme=2h", "3GiB")
	for _, v := range candidates {
		fresh := configure(t, nil, command).fs
		if fresh.Set(name, v) == nil && fresh.Lookup(name).Value.String() != f.Value.String() {
			return v
		}
	}
	t.Fatalf("baton %s --%s: no sample value is accepted; add one to sampleValue", command, name)
	return ""
}

// want is what the flag shows once v is Set on a fresh flag set.
func setOnFresh(t *testing.T, command, name, v string) string {
	t.Helper()
	fresh := configure(t, nil, command).fs
	if err := fresh.Set(name, v); err != nil {
		t.Fatal(err)
	}
	return fresh.Lookup(name).Value.String()
}

func TestConfigReachesEveryFlagByEnvAndFile(t *testing.T) {
	t.Parallel()
	for _, command := range configCommands {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			c := configure(t, nil, command)
			if !c.stopped {
				t.Fatalf("baton %s does not configure its flags through parseFlags: exit %d, %s", command, c.code, c.stderr)
			}
			n := 0
			c.fs.VisitAll(func(f *flag.Flag) {
				if f.Name == config.Flag {
					return
				}
				n++
				v := sampleValue(t, command, f.Name)
				want := setOnFresh(t, command, f.Name, v)
				env := configure(t, map[string]string{config.EnvName(f.Name): v}, command)
				if !env.stopped || env.value(f.Name) != want || env.res.Sources[f.Name].Kind != config.FromEnv {
					t.Errorf("--%s from %s=%q: exit %d, value %q, want %q (%s)", f.Name, config.EnvName(f.Name), v, env.code, env.fs.Lookup(f.Name).Value, want, env.stderr)
				}
				text, err := yaml.Marshal(map[string]string{f.Name: v})
				if err != nil {
					t.Fatal(err)
				}
				file := configure(t, nil, command, "--config", writeConfig(t, string(text)))
				if !file.stopped || file.value(f.Name) != want || file.res.Sources[f.Name].Kind != config.FromFile {
					t.Errorf("--%s from the file %q: exit %d, value %q, want %q (%s)", f.Name, text, file.code, file.fs.Lookup(f.Name).Value, want, file.stderr)
				}
			})
			if n < 10 {
				t.Errorf("baton %s has %d flags: the flag set is not the command's", command, n)
			}
		})
	}
}

// printConfigOf is `baton config print command args...`.
func printConfigOf(t *testing.T, env map[string]string, command string, args ...string) string {
	t.Helper()
	var stdout, stderr syncBuffer
	ctx := withConfigMode(context.Background(), configMode{lookupEnv: envOf(env)})
	if code := run(ctx, append([]string{"config", "print", command}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("baton config print %s: exit %d: %s", command, code, stderr.String())
	}
	return stdout.String()
}

func TestConfigPrintRoundTrips(t *testing.T) {
	t.Parallel()
	for _, command := range configCommands {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			var args []string
			base := configure(t, nil, command)
			base.fs.VisitAll(func(f *flag.Flag) {
				if f.Name != config.Flag {
					args = append(args, "--"+f.Name+"="+sampleValue(t, command, f.Name))
				}
			})
			if name := repeatedFlag(base.fs); name != "" {
				args = append(args, "--"+name+"=second") // two values come back as two
			}
			for _, tc := range []struct {
				what string
				args []string
			}{{"defaults", nil}, {"every flag set", args}} {
				want := configure(t, nil, command, tc.args...)
				printed := printConfigOf(t, nil, command, tc.args...)
				got := configure(t, nil, command, "--config", writeConfig(t, printed))
				if !got.stopped {
					t.Fatalf("%s: the printed configuration is not a valid --config file: %s\n%s", tc.what, got.stderr, printed)
				}
				want.fs.VisitAll(func(f *flag.Flag) {
					if f.Name == config.Flag || config.SecretFlag(f.Name) {
						return // redacted
					}
					if g := got.value(f.Name); g != f.Value.String() {
						t.Errorf("%s: --%s printed and read back is %q, want %q\n%s", tc.what, f.Name, g, f.Value, printed)
					}
				})
			}
		})
	}
}

// repeatedFlag is the name of a repeatable flag of fs, "" when it has none.
func repeatedFlag(fs *flag.FlagSet) string {
	var name string
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(config.Repeated); ok && name == "" {
			name = f.Name
		}
	})
	return name
}

func TestConfigPrintShowsSourcesAndRedactsSecrets(t *testing.T) {
	t.Parallel()
	secretFile := filepath.Join(t.TempDir(), "resize.secret")
	file := writeConfig(t, strings.Join([]string{
		"listen: 127.0.0.1:9000",
		"blob-url: s3://AKIAEXAMPLE:blobpass@bucket/prefix?endpoint=http://minio:9000&secret_key=blobquery",
		"push-target:",
		"  - resize=http://hook:hookpass@push.example.com/run?token=hooktoken",
		"  - thumb=http://push.example.com/t",
		"push-secret: [resize=pushsecret, 'thumb=@" + secretFile + "']",
		"internal-tls-key: /etc/baton/internal.key",
		"internal-tls-cert: /etc/baton/internal.pem",
		"internal-tls-client-ca: /etc/baton/ca.pem",
	}, "\n")+"\n")
	env := map[string]string{
		"BATON_DATABASE_URL":      "postgres://baton:dbpass@db.internal:5432/baton?sslmode=verify-full&sslpassword=dbsslpass",
		"BATON_DATA_DATABASE_URL": "host=data.internal user=baton password=datapass dbname=data",
		"BATON_REDIS_URL":         "redis://:redispass@redis.internal:6379/0",
		"BATON_NATS_URL":          "nats://natstoken@nats.internal:4222",
		"BATON_STS_ENDPOINT":      "https://sts:stspass@sts.example.com",
		"BATON_CONFIG":            file,
	}
	out := printConfigOf(t, env, "server", "--max-conns", "8")
	for _, secret := range []string{"dbpass", "dbsslpass", "datapass", "redispass", "natstoken", "stspass", "blobpass", "blobquery", "hookpass", "hooktoken", "pushsecret"} {
		if strings.Contains(out, secret) {
			t.Errorf("config print shows the secret %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{
		"# config: " + file + " (env BATON_CONFIG)",
		"database-url: postgres://baton:REDACTED@db.internal:5432/baton?sslmode=verify-full&sslpassword=REDACTED # env BATON_DATABASE_URL",
		"data-database-url: host=data.internal user=baton password=REDACTED dbname=data # env BATON_DATA_DATABASE_URL",
		"redis-url: redis://:REDACTED@redis.internal:6379/0 # env BATON_REDIS_URL",
		"nats-url: nats://REDACTED@nats.internal:4222 # env BATON_NATS_URL",
		"sts-endpoint: https://sts:REDACTED@sts.example.com # env BATON_STS_ENDPOINT",
		"blob-url: s3://AKIAEXAMPLE:REDACTED@bucket/prefix?endpoint=http://minio:9000&secret_key=REDACTED # file " + file + ":2",
		"push-target: # file " + file + ":3\n  - resize=http://hook:REDACTED@push.example.com/run?token=REDACTED\n  - thumb=http://push.example.com/t\n",
		"push-secret: # file " + file + ":6\n  - resize=REDACTED\n  - thumb=@" + secretFile + "\n",
		"internal-tls-key: /etc/baton/internal.key # file " + file + ":7",
		"listen: 127.0.0.1:9000 # file " + file + ":1",
		"max-conns: 8 # flag",
		"internal-listen: 127.0.0.1:8081 # default",
		"task-credentials-max-ttl: 12h0m0s # default",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigEnvNamesKeepTheirMeaning guards the variables Baton reads or sets that are not flags:
// a flag whose variable is one of them would read it with another meaning.
func TestConfigEnvNamesKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	notFlags := []string{"BATON_API_KEY", config.Env, runner.EnvPayload, runner.EnvBuffers}
	for _, name := range wrapper.Reserved {
		// BATON_URL is worker --url, the public URL it hands the child as BATON_URL: one meaning.
		if strings.HasPrefix(name, "BATON_") && name != wrapper.EnvPublicURL {
			notFlags = append(notFlags, name)
		}
	}
	for _, command := range configCommands {
		configure(t, nil, command).fs.VisitAll(func(f *flag.Flag) {
			if f.Name != config.Flag && slices.Contains(notFlags, config.EnvName(f.Name)) {
				t.Errorf("baton %s --%s is configured by %s, a variable with another meaning", command, f.Name, config.EnvName(f.Name))
			}
		})
	}
	if config.EnvName("url") != wrapper.EnvPublicURL {
		t.Errorf("worker --url is %s, the child gets %s", config.EnvName("url"), wrapper.EnvPublicURL)
	}
}

func TestConfigUsageMentionsEnvAndFile(t *testing.T) {
	t.Parallel()
	for _, command := range configCommands {
		c := configure(t, nil, command, "-h")
		for _, want := range []string{"-config FILE", "BATON_<FLAG>", "baton config print " + command} {
			if !strings.Contains(c.stderr, want) {
				t.Errorf("baton %s -h lacks %q:\n%s", command, want, c.stderr)
			}
		}
	}
	if !strings.Contains(configure(t, nil, "worker", "-h").stderr, "Usage: baton worker --task NAME") {
		t.Error("baton worker -h lost its own usage text")
	}
}

func TestConfigPrintUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"config"}, {"config", "show", "server"}, {"config", "print"}, {"config", "print", "job"}} {
		var stderr syncBuffer
		if code := run(context.Background(), args, &syncBuffer{}, &stderr); code != 2 || stderr.String() == "" {
			t.Errorf("baton %s: exit %d, stderr %q; want 2 and a message", strings.Join(args, " "), code, stderr.String())
		}
	}
}

func TestDevRunsFromItsConfigFileAndEnvironment(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	file := writeConfig(t, fmt.Sprintf("data-dir: %s\nlisten: 127.0.0.1:0\ninternal-listen: 127.0.0.1:0\nmetrics-listen: \"\"\nshutdown-timeout: 5s\nsink: true\n", dataDir))
	env := map[string]string{config.Env: file, "BATON_SINK": "false"}
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(withConfigMode(context.Background(), configMode{lookupEnv: envOf(env)}))
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"dev"}, &stdout, &stderr) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("baton dev exited %d; stderr:\n%s", code, stderr.String())
		}
	}()
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("baton dev exited %d; stderr:\n%s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	banner := stdout.String()
	// Up and serving (and done setting up) before it is stopped.
	m := regexp.MustCompile(`producer API\s+(http://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no producer API in the banner:\n%s", banner)
	}
	if resp, err := call(&http.Client{Timeout: 10 * time.Second}, http.MethodGet, m[1]+"/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
	for _, want := range []string{
		filepath.Join(dataDir, dbFile) + " (SQLite)", // data-dir from the file
		"(no sink here: --sink=false)",               // BATON_SINK over the file's sink: true
		"metrics       off",                          // metrics-listen: ""
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
}
