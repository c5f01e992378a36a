// Package cmdline is the plumbing that the commands of `baton` share: parsing flags among
// positional words, a command group's subcommand word, and handing a command's flag set to
// `baton completion` without running the command.
package cmdline

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
)

// flagSetKey marks a context in which a command only defines its flags: ParseFlags hands the
// flag set over instead of parsing, and the command returns before doing anything. This is how
// `baton completion` learns every command's flags from the code that defines them.
type flagSetKey struct{}

// ParseFlags parses args into fs. When it returns false the command must return the code:
// 0 after -h (the usage is printed), 2 after a bad flag (the flag package printed why).
func ParseFlags(ctx context.Context, fs *flag.FlagSet, args []string) (int, bool) {
	if p, ok := ctx.Value(flagSetKey{}).(**flag.FlagSet); ok {
		*p = fs
		return 0, false
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

// ParseWords is ParseFlags for commands that also take positional words: flags may come before,
// between or after them, and it returns the words.
func ParseWords(ctx context.Context, fs *flag.FlagSet, args []string) ([]string, int, bool) {
	if p, ok := ctx.Value(flagSetKey{}).(**flag.FlagSet); ok {
		*p = fs
		return nil, 0, false
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false // the flag package has printed the error and the usage
	}
	return pos, 0, true
}

// parseInterleaved parses flags placed before, between or after the positional arguments, and
// returns the latter.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil // everything after "--" is positional
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// DefinedFlags returns the flag set that the command run defines after the words args (its
// subcommand), without running it: nil when it defines none through ParseFlags or ParseWords.
func DefinedFlags(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int, args ...string) *flag.FlagSet {
	var fs *flag.FlagSet
	ctx := context.WithValue(context.Background(), flagSetKey{}, &fs)
	run(ctx, args, io.Discard, io.Discard)
	return fs
}

// GroupNames is the sorted names of a command group's subcommands.
func GroupNames[F any](cmds map[string]F) []string {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Subcommand reads the word after a command group (`baton apikey create`): it answers the group's
// help itself (exit 0) and refuses no word or an unknown one with the usage (exit 2); ok says that
// cmd is one of commands and the caller goes on.
func Subcommand(group, usage string, commands []string, args []string, stdout, stderr io.Writer) (cmd string, code int, ok bool) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return "", 2, false
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return "", 0, false
	}
	if !slices.Contains(commands, args[0]) {
		fmt.Fprintf(stderr, "baton %s: unknown command %q\n\n%s", group, args[0], usage)
		return "", 2, false
	}
	return args[0], 0, true
}
