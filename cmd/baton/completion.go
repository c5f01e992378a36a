package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/baton-dev/baton/internal/completion"
)

const completionUsage = `Usage: baton completion bash|zsh|fish

Prints a completion script for the shell, made from baton's own commands and flags. Install:
  bash:  source <(baton completion bash)                 # e.g. in ~/.bashrc
  zsh:   source <(baton completion zsh)                  # in ~/.zshrc, after compinit
         (or: baton completion zsh > "${fpath[1]}/_baton")
  fish:  baton completion fish > ~/.config/fish/completions/baton.fish
`

// completionShells is the subcommands of `baton completion`.
var completionShells = []string{"bash", "fish", "zsh"}

// fileFlags are the flags whose value is a file or directory: completion offers paths for them.
var fileFlags = map[string]bool{
	"f": true, "config": true, "out": true, "data-dir": true, "sqlite": true, "cpuprofile": true, "work-dir": true, "bundle-cache": true,
	"internal-tls-cert": true, "internal-tls-key": true, "internal-tls-ca": true, "internal-tls-client-ca": true,
}

// completionTree is every command path and what completes after it, from the command table and
// the flag sets the commands themselves define.
func completionTree() ([]completion.Entry, error) {
	root := completion.Entry{Path: "baton", Subs: []string{"completion", "help"}}
	entries := []completion.Entry{{}} // the root, filled in at the end
	for _, c := range commandTable() {
		if c.hidden {
			continue
		}
		root.Subs = append(root.Subs, c.name)
		path := "baton " + c.name
		if c.subcommands == nil {
			fs, err := flagSetOf(c)
			if err != nil {
				return nil, err
			}
			entries = append(entries, completion.Entry{Path: path, Flags: compFlags(fs)})
			continue
		}
		e := completion.Entry{Path: path, Subs: c.subcommands}
		if c.flags {
			fs, err := flagSetOf(c)
			if err != nil {
				return nil, err
			}
			e.Flags = compFlags(fs)
		}
		entries = append(entries, e)
		for _, sub := range c.subcommands {
			fs, err := flagSetOf(c, sub)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", path, sub, err)
			}
			entries = append(entries, completion.Entry{Path: path + " " + sub, Flags: compFlags(fs)})
		}
	}
	entries = append(entries, completion.Entry{Path: "baton completion", Subs: completionShells})
	slices.Sort(root.Subs)
	entries[0] = root
	return entries, nil
}

// compFlags are the flags of fs, for completion.
func compFlags(fs *flag.FlagSet) []completion.Flag {
	var flags []completion.Flag
	fs.VisitAll(func(f *flag.Flag) {
		cf := completion.Flag{Name: f.Name, Value: true, File: fileFlags[f.Name]}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			cf.Value = false
		}
		if v, ok := f.Value.(interface{ Formats() []string }); ok {
			cf.Values = v.Formats() // -o: ctl's output formats of the command
		}
		_, cf.Usage = flag.UnquoteUsage(f)
		flags = append(flags, cf)
	})
	return flags
}

// runCompletion is `baton completion bash|zsh|fish`.
func runCompletion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, completionUsage)
		return 0
	}
	if len(args) != 1 || !slices.Contains(completionShells, args[0]) {
		fmt.Fprintf(stderr, "baton completion: want one of bash, zsh or fish, got %q\n\n%s", args, completionUsage)
		return 2
	}
	entries, err := completionTree()
	if err != nil {
		fmt.Fprintln(stderr, "baton completion:", err)
		return 1
	}
	var script string
	switch args[0] {
	case "bash":
		script = completion.Bash(entries)
	case "zsh":
		script = completion.Zsh(entries)
	case "fish":
		script = completion.Fish(entries)
	}
	fmt.Fprint(stdout, script)
	return 0
}
