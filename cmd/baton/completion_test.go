package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, errOut := baton("completion", shell)
	if code != 0 {
		t.Fatalf("completion %s: exit %d: %s", shell, code, errOut)
	}
	return out
}

// offered is the words the bash or zsh script offers after path.
func offered(t *testing.T, script, shell, path string) []string {
	t.Helper()
	head, list, end := "'"+path+"')\n", "words='", "'"
	if shell == "zsh" {
		head, list, end = "('"+path+"')\n", "opts=(", ")"
	}
	_, block, ok := strings.Cut(script, head)
	if !ok {
		t.Fatalf("the %s script has no case for %s", shell, path)
	}
	_, block, _ = strings.Cut(block, list)
	block, _, _ = strings.Cut(block, end)
	return strings.Fields(block)
}

// Every command, subcommand and flag the commands define is in every script: the scripts are
// made from the flag sets, so a new flag cannot be missing.
func TestCompletion_EveryCommandAndFlagIsInEveryScript(t *testing.T) {
	t.Parallel()
	scripts := map[string]string{}
	for _, sh := range completionShells {
		scripts[sh] = completionScript(t, sh)
	}
	offers := func(path string, words ...string) {
		t.Helper()
		for _, sh := range []string{"bash", "zsh"} {
			got := offered(t, scripts[sh], sh, path)
			for _, w := range words {
				if !slices.Contains(got, w) {
					t.Errorf("the %s script does not offer %s after %s", sh, w, path)
				}
			}
		}
		for _, w := range words {
			form := fmt.Sprintf("-n 'test (__baton_path) = %q' ", path)
			switch {
			case !strings.HasPrefix(w, "-"):
				form += "-a '"
			case strings.HasPrefix(w, "--"):
				form += "-l " + w[2:] + " "
			default:
				form += "-s " + w[1:] + " "
			}
			if !strings.Contains(scripts["fish"], form) || (!strings.HasPrefix(w, "-") && !regexp.MustCompile(regexp.QuoteMeta(form)+`[^']*\b`+w+`\b`).MatchString(scripts["fish"])) {
				t.Errorf("the fish script does not offer %s after %s", w, path)
			}
		}
	}
	flagsOf := func(c command, args ...string) []string {
		t.Helper()
		fs, err := flagSetOf(c, args...)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		fs.VisitAll(func(f *flag.Flag) {
			if len(f.Name) == 1 {
				names = append(names, "-"+f.Name)
			} else {
				names = append(names, "--"+f.Name)
			}
		})
		return names
	}
	for _, c := range commandTable() {
		if c.hidden {
			if strings.Contains(scripts["bash"], c.name) {
				t.Errorf("the hidden command %s is offered", c.name)
			}
			continue
		}
		offers("baton", c.name)
		if c.subcommands == nil {
			offers("baton "+c.name, flagsOf(c)...)
			continue
		}
		offers("baton "+c.name, c.subcommands...)
		if c.flags {
			offers("baton "+c.name, flagsOf(c)...)
		}
		for _, sub := range c.subcommands {
			offers("baton "+c.name+" "+sub, flagsOf(c, sub)...)
		}
	}
	offers("baton", "completion", "help")
	offers("baton completion", "bash", "zsh", "fish")
	// Spot checks against names written out here, in case the table itself lost one.
	offers("baton job submit", "-f", "--idempotency-key", "-o", "--output", "--json", "--url", "--api-key")
	offers("baton dataset dead-letters", "-o")
	offers("baton dataset rows", "--where", "--after")
	offers("baton dev", "--demo", "--metrics-listen", "--data-dir")
	offers("baton worker", "--exec", "--task")
	offers("baton certs dev", "--force", "--out")
	offers("baton signing-key", "list", "rotate", "retire")
	offers("baton signing-key retire", "--force", "--data-dir", "--database-url")
	offers("baton signing-key list", "-o", "--data-dir", "--database-url")
	offers("baton version", "-o")
	offers("baton query", "audit", "--limit", "-o", "--url", "--api-key")
	offers("baton query audit", "--before", "--limit", "-o")
}

// compReply runs the bash script's completion function on words, the last being the word under
// the cursor, and returns what it offers.
func compReply(t *testing.T, script string, words ...string) []string {
	t.Helper()
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+w+"'")
	}
	cmd := exec.Command("bash", "-c", `source "$1"; COMP_WORDS=(`+strings.Join(quoted, " ")+`); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _baton; printf '%s\n' "${COMPREPLY[@]}"`, "_", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func TestCompletion_BashScriptParsesAndCompletes(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "baton.bash")
	if err := os.WriteFile(script, []byte(completionScript(t, "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	doc := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(doc, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"baton", "jo"}, "job"},
		{[]string{"baton", "d"}, "dataset dev"},
		{[]string{"baton", "job", "g"}, "get"},
		{[]string{"baton", "job", "get", "--out"}, "--output"},
		{[]string{"baton", "job", "get", "job-1", "-o", ""}, "table json yaml"},
		{[]string{"baton", "job", "get", "--output", "y"}, "yaml"},
		{[]string{"baton", "job", "get", "--url", ""}, ""},
		{[]string{"baton", "pipeline", "deploy", "-f", filepath.Join(dir, "pipe")}, doc},
		{[]string{"baton", "dataset", "dead-letters", "--js"}, "--json"},
		{[]string{"baton", "apikey", "create", "--te"}, "--tenant"},
		{[]string{"baton", "sig"}, "signing-key"},
		{[]string{"baton", "signing-key", "r"}, "retire rotate"},
		{[]string{"baton", "signing-key", "retire", "k-1", "--f"}, "--force"},
		{[]string{"baton", "dev", "--data-dir", filepath.Join(dir, "pipe")}, doc},
		{[]string{"baton", "dev", "--dem"}, "--demo"},
		{[]string{"baton", "completion", ""}, "bash fish zsh"},
		{[]string{"baton", "version", "-"}, "--json -o --output"},
		{[]string{"baton", "frobnicate", "-"}, ""},
		{[]string{"baton", "q"}, "query"},
		{[]string{"baton", "query", "a"}, "audit"},
		{[]string{"baton", "query", "-o", ""}, "table json csv"},
		{[]string{"baton", "query", "SELECT 1", "--li"}, "--limit"},
		{[]string{"baton", "query", "--limit", "5", "SELECT 1", "--out"}, "--output"},
		{[]string{"baton", "query", "audit", "--be"}, "--before"},
		{[]string{"baton", "query", "audit", "-o", ""}, "table json yaml"},
	} {
		if got := strings.Join(compReply(t, script, tc.words...), " "); got != tc.want {
			t.Errorf("%q: completes %q, want %q", tc.words, got, tc.want)
		}
	}
}

func TestCompletion_ZshScriptParses(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("zsh is not installed")
	}
	script := filepath.Join(t.TempDir(), "_baton")
	if err := os.WriteFile(script, []byte(completionScript(t, "zsh")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("zsh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
}

func TestCompletion_FishScriptParsesAndCompletes(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("fish"); err != nil {
		t.Skip("fish is not installed")
	}
	script := filepath.Join(t.TempDir(), "baton.fish")
	if err := os.WriteFile(script, []byte(completionScript(t, "fish")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("fish", "--no-execute", script).CombinedOutput(); err != nil {
		t.Fatalf("fish --no-execute: %v\n%s", err, out)
	}
	for line, want := range map[string]string{
		"baton jo":                    "job",
		"baton job g":                 "get",
		"baton job get --out":         "--output",
		"baton job get -o ":           "table json yaml",
		"baton completion ":           "bash fish zsh",
		"baton apikey create -":       "--data-dir",
		"baton signing-key r":         "retire rotate",
		"baton query a":               "audit",
		"baton query 'SELECT 1' --li": "--limit",
	} {
		out, err := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line).CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0]) // a candidate, then its description
		}
		for _, w := range strings.Fields(want) {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("%q completes %q, want %s among them", line, got, w)
			}
		}
	}
}

func TestCompletion_UsageErrors(t *testing.T) {
	t.Parallel()
	if code, out, _ := baton("completion", "-h"); code != 0 || !strings.Contains(out, "source <(baton completion bash)") {
		t.Errorf("completion -h: exit %d\n%s", code, out)
	}
	if code, _, errOut := baton("completion", "powershell"); code != 2 || !strings.Contains(errOut, "bash, zsh or fish") {
		t.Errorf("completion powershell: exit %d\n%s", code, errOut)
	}
}
