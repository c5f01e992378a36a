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
			"words='-o --config --limit --watch' ;;", `'job get') path+=`},
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

// A command with both subcommands and flags of its own offers both, and a word of its own after
// it (not one of its subcommands) leaves the path at the command, so its flags still complete.
func TestScriptsOfferSubcommandsAndFlagsOfOneCommand(t *testing.T) {
	entries := []completion.Entry{
		{Path: "baton", Subs: []string{"query"}},
		{Path: "baton query", Subs: []string{"audit"}, Flags: []completion.Flag{{Name: "limit", Value: true, Usage: "rows"}}},
		{Path: "baton query audit", Flags: []completion.Flag{{Name: "before", Value: true, Usage: "older"}}},
	}
	for shell, want := range map[string][]string{
		"bash": {"'baton query')\n        case $prev in -limit|--limit) COMPREPLY=(); return ;; esac\n        words='audit --limit' ;;",
			`case "${COMP_WORDS[1]} ${COMP_WORDS[2]}" in`, `'query audit') path+=`},
		"zsh": {"('baton query')\n        case $prev in (-limit|--limit) return 1 ;; esac\n        opts=(audit --limit) ;;",
			`case "${words[2]} ${words[3]}" in`, `('query audit') cmdpath+=`},
		"fish": {`complete -c baton -n 'test (__baton_path) = "baton query"' -a 'audit'`,
			`complete -c baton -n 'test (__baton_path) = "baton query"' -l limit -x -d 'rows'`,
			`contains -- "$w[2] $w[3]" 'query audit'`},
	} {
		script := map[string]func([]completion.Entry) string{"bash": completion.Bash, "zsh": completion.Zsh, "fish": completion.Fish}[shell](entries)
		for _, w := range want {
			if !strings.Contains(script, w) {
				t.Errorf("%s script lacks %q:\n%s", shell, w, script)
			}
		}
	}
}
