package completion_test

import (
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/completion"
)

// Each shell's script offers a group's subcommands, a command's flags, a fixed flag's values, and
// paths for a file flag, and nothing for a value of the user's own.
func TestScriptsOfferWhatEachPathTakes(t *testing.T) {
	entries := []completion.Entry{
		{Path: "baton", Subs: []string{"job", "help"}},
		{Path: "baton job", Subs: []string{"get"}},
		{Path: "baton job get", Flags: []completion.Flag{
			{Name: "o", Value: true, Values: []string{"table", "json"}, Usage: "output format (table, json)"},
			{Name: "config", Value: true, File: true, Usage: "the user's file: a path"},
			{Name: "limit", Value: true, Usage: "at most N"},
			{Name: "watch", Usage: "keep watching"},
		}},
	}
	for shell, want := range map[string][]string{
		"bash": {"'baton job')\n        words='get' ;;", "case $prev in -o|--o) COMPREPLY=($(compgen -W 'table json'",
			"case $prev in -config|--config) COMPREPLY=($(compgen -f", "case $prev in -limit|--limit) COMPREPLY=(); return ;; esac",
			"words='-o --config --limit --watch' ;;", "job) path+="},
		"zsh": {"('baton job')\n        opts=(get) ;;", "case $prev in (-o|--o) compadd -- table json; return ;; esac",
			"case $prev in (-config|--config) _files; return ;; esac", "opts=(-o --config --limit --watch) ;;"},
		"fish": {`complete -c baton -n 'test (__baton_path) = "baton job"' -a 'get'`, "-s o -x -a 'table json' -d 'output format'",
			"-l config -r -F -d 'the user\\'s file'", "-l limit -x -d 'at most N'", "-l watch -d 'keep watching'"},
	} {
		script := map[string]func([]completion.Entry) string{"bash": completion.Bash, "zsh": completion.Zsh, "fish": completion.Fish}[shell](entries)
		for _, w := range want {
			if !strings.Contains(script, w) {
				t.Errorf("%s script lacks %q:\n%s", shell, w, script)
			}
		}
	}
}
