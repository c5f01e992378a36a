package main

import (
	"errors"
	"flag"

	"github.com/baton-dev/baton/internal/cmdline"
)

// flagSetOf returns the flag set that the command c defines after the words args (its subcommand),
// without running it.
func flagSetOf(c command, args ...string) (*flag.FlagSet, error) {
	fs := cmdline.DefinedFlags(c.run, args...)
	if fs == nil {
		return nil, errors.New("baton " + c.name + " defines no flags through parseFlags")
	}
	return fs, nil
}
