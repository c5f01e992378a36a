package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/store"
)

const signingKeyUsage = `Usage:
  baton signing-key list [-o table|json|yaml]
                        list the capability-token signing keys and which one signs now
                        (never their secrets)
  baton signing-key rotate [-o json|yaml]
                        create a new key, which signs from now on; stdout: its kid alone
  baton signing-key retire KID [--force]
                        stop a key from verifying: every token it signed answers 401 from now
                        on; refused for the key that signs now unless --force (rotate first);
                        a key already retired is left as it is
Each takes --data-dir DIR (the dev server's) or --database-url URL.
Procedure: rotate, wait the longest token lifetime (24 h) for the old tokens to expire, then
retire the old key. Every replica picks up a rotation or retirement within 30 s.
`

// signingKeyCommands is the subcommands of `baton signing-key`.
var signingKeyCommands = []string{"list", "retire", "rotate"}

// longestTokenLifetime is the longest a capability token lives (auth.TokenTTL's cap), as text.
var longestTokenLifetime = strings.TrimSuffix(auth.TokenTTL(1000*time.Hour).String(), "0m0s")

// signingKeyView is a signing key as -o json and yaml print it: never its secret.
type signingKeyView struct {
	KID       string     `json:"kid"`
	CreatedAt time.Time  `json:"created_at"`
	RetiredAt *time.Time `json:"retired_at,omitempty"`
	Signing   bool       `json:"signing"` // the newest unretired key: the one that signs new tokens
}

// signingKeyViews is keys (newest first, as the store lists them) without their secrets; the
// first unretired one is the signer.
func signingKeyViews(keys []*store.SigningKey) []signingKeyView {
	views := make([]signingKeyView, len(keys))
	signer := false
	for i, k := range keys {
		views[i] = signingKeyView{KID: k.KID, CreatedAt: k.CreatedAt}
		if !k.RetiredAt.IsZero() {
			views[i].RetiredAt = &k.RetiredAt
		} else if !signer {
			views[i].Signing, signer = true, true
		}
	}
	return views
}

func runSigningKey(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd, code, ok := cmdline.Subcommand("signing-key", signingKeyUsage, signingKeyCommands, args, stdout, stderr)
	if !ok {
		return code
	}
	fs := flag.NewFlagSet("baton signing-key "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sf storeFlags
	sf.register(fs)
	out := new(ctl.Output)
	force := new(bool)
	switch cmd {
	case "list", "rotate":
		out = ctl.RegisterOutput(fs)
	case "retire":
		force = fs.Bool("force", false, "retire the key even though it signs now (every live token it signed fails)")
	}
	pos, code, ok := cmdline.ParseWords(ctx, fs, args[1:])
	if !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton signing-key %s: %s\n", cmd, fmt.Sprintf(format, a...))
		return 2
	}
	switch {
	case cmd == "retire" && len(pos) != 1:
		return usageErr("give one key id (see `baton signing-key list`)")
	case cmd != "retire" && len(pos) > 0:
		return usageErr("unexpected argument %q", pos[0])
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "baton signing-key %s: %v\n", cmd, err)
		return 1
	}
	st, err := sf.open(ctx)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	switch cmd {
	case "list":
		keys, err := st.SigningKeyList(ctx)
		if err != nil {
			return fail(err)
		}
		views := signingKeyViews(keys)
		err = ctl.WriteOutput(stdout, *out, map[string][]signingKeyView{"signing_keys": views}, func() error {
			tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KID\tCREATED\tRETIRED\tSIGNING")
			for _, v := range views {
				retired, signing := "-", "-"
				if v.RetiredAt != nil {
					retired = v.RetiredAt.Local().Format(time.DateTime)
				}
				if v.Signing {
					signing = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.KID, v.CreatedAt.Local().Format(time.DateTime), retired, signing)
			}
			return tw.Flush()
		})
		if err != nil {
			return fail(err)
		}
		if len(views) == 0 && *out == ctl.OutputTable {
			fmt.Fprintln(stderr, "no signing keys yet: the first token a server issues creates one (or run `baton signing-key rotate`)")
		}
	case "rotate":
		kid, err := auth.NewTokens(st, nil).Rotate(ctx)
		if err != nil {
			return fail(err)
		}
		keys, err := st.SigningKeyList(ctx)
		if err != nil {
			return fail(err)
		}
		views := signingKeyViews(keys)
		i := slices.IndexFunc(views, func(v signingKeyView) bool { return v.KID == kid })
		if i < 0 {
			return fail(fmt.Errorf("the new key %s is not in the store", kid))
		}
		err = ctl.WriteOutput(stdout, *out, views[i], func() error {
			_, err := fmt.Fprintln(stdout, kid)
			return err
		})
		if err != nil {
			return fail(err)
		}
		if !views[i].Signing {
			// Keys are ordered by creation time: a key made by a machine whose clock is ahead
			// of this one's stays the newest.
			return fail(fmt.Errorf("created key %s, but it does not sign: key %s is newer (created %s); is this machine's clock behind?",
				kid, views[0].KID, views[0].CreatedAt.Local().Format(time.DateTime)))
		}
		fmt.Fprintf(stderr, "created signing key %s; it signs new capability tokens from now on\n", kid)
		fmt.Fprintf(stderr, "every replica picks it up within 30 s; tokens signed by older keys keep verifying until those keys are retired\n")
		if len(views) > 1 && views[1].RetiredAt == nil {
			fmt.Fprintf(stderr, "to retire the previous key, wait the longest token lifetime (%s), then: baton signing-key retire %s\n", longestTokenLifetime, views[1].KID)
		}
	case "retire":
		kid := pos[0]
		keys, err := st.SigningKeyList(ctx)
		if err != nil {
			return fail(err)
		}
		views := signingKeyViews(keys)
		i := slices.IndexFunc(views, func(v signingKeyView) bool { return v.KID == kid })
		switch {
		case i < 0:
			return fail(fmt.Errorf("no signing key %s (see `baton signing-key list`)", kid))
		case views[i].RetiredAt != nil:
			fmt.Fprintf(stderr, "signing key %s was already retired on %s; nothing to do\n", kid, views[i].RetiredAt.Local().Format(time.DateTime))
			return 0
		case views[i].Signing && !*force:
			return fail(fmt.Errorf("key %s signs now: rotate first (`baton signing-key rotate`), wait the longest token lifetime (%s), then retire it; "+
				"retiring it now would invalidate every live token it signed, and the next token would be signed by an older key or a new one (--force to do it anyway)",
				kid, longestTokenLifetime))
		}
		if err := auth.NewTokens(st, nil).Retire(ctx, kid); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fail(fmt.Errorf("no signing key %s (see `baton signing-key list`)", kid))
			}
			return fail(err)
		}
		fmt.Fprintf(stdout, "retired %s\n", kid)
		fmt.Fprintf(stderr, "tokens signed by %s answer 401 from now on (on every replica within 30 s): the workers of live tasks holding one fail their next call\n", kid)
		if views[i].Signing {
			next := "a new key, created by the next token a server issues"
			if j := slices.IndexFunc(views[i+1:], func(v signingKeyView) bool { return v.RetiredAt == nil }); j >= 0 {
				next = "the older key " + views[i+1+j].KID
			}
			fmt.Fprintf(stderr, "%s signed new tokens until now; the next token is signed by %s\n", kid, next)
		} else if age := time.Since(views[i-1].CreatedAt); age < auth.TokenTTL(1000*time.Hour) {
			fmt.Fprintf(stderr, "the key after it, %s, is only %s old: tokens live up to %s, so some %s signed may still be in use; "+
				"after a rotation, wait the longest token lifetime before retiring\n", views[i-1].KID, age.Round(time.Second), longestTokenLifetime, kid)
		}
	}
	return 0
}
