package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/cmdline"
)

// baton udf: user code bundles, built from a folder here and uploaded, listed and disabled
// through the producer API.

const udfUsage = `Usage: baton udf <command> [flags]

Commands:
  build DIR [-o FILE] [--runtime R] [--entrypoint FILE] [--env-allow NAME ...]
                          write DIR/bundle_manifest.json and the bundle's zip (default DIR.zip)
  upload FILE.zip|DIR     upload a bundle (a folder is built first, in memory)
  list                    the tenant's bundles, newest first
  get ID                  a bundle and its manifest
  disable ID              disable a bundle for good: its tasks fail instead of running it

build guesses the runtime from the entrypoint (.py: python; .js, .mjs, .cjs: node; else binary)
and the entrypoint from the folder (main.py, index.js, index.mjs, handler.py, bootstrap) unless
told. Dependencies must be vendored in the folder: nothing is installed when the bundle runs.

Every command but build takes --url (env BATON_URL, default ` + DefaultURL + `),
--api-key (env BATON_API_KEY) and -o table|json|yaml (--json: -o json).
`

var udfCommands = map[string]func(context.Context, *jobCmd, []string) int{
	"build":   udfBuild,
	"upload":  udfUpload,
	"list":    udfList,
	"get":     udfGet,
	"disable": udfDisable,
}

// UDFCommands is the sorted subcommands of `baton udf`.
func UDFCommands() []string { return cmdline.GroupNames(udfCommands) }

// RunUDF runs "baton udf ...", and returns the exit status as RunJob does.
func RunUDF(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "udf", udfUsage, udfCommands, args, stdout, stderr)
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func udfBuild(ctx context.Context, c *jobCmd, args []string) int {
	out := c.fs.String("o", "", "the zip to write (default: DIR.zip beside DIR)")
	runtime := c.fs.String("runtime", "", "python, node or binary (default: from the entrypoint)")
	entry := c.fs.String("entrypoint", "", "the file the bundle starts at (default: found in DIR)")
	var allow listFlag
	c.fs.Var(&allow, "env-allow", "`NAME` of a worker variable (--child-env) the bundle may see (repeatable)")
	pos, code, ok := c.parse(args, "DIR")
	if !ok {
		return code
	}
	dir := filepath.Clean(pos[0])
	if *out == "" {
		*out = dir + ".zip"
	}
	m, zip, err := buildBundle(dir, *runtime, *entry, allow)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	manifest, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestName), append(manifest, '\n'), 0o644); err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	if err := os.WriteFile(*out, zip, 0o644); err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	fmt.Fprintf(c.stdout, "wrote %s: %s bundle, entrypoint %s, %d files, %d bytes\n", *out, m.Runtime, m.Entrypoint, len(m.Files), len(zip))
	return 0
}

// buildBundle builds the bundle of dir in memory, guessing what runtime and entry leave unsaid.
func buildBundle(dir, runtime, entry string, allow []string) (*bundle.Manifest, []byte, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("%s is not a folder", dir)
	}
	if entry == "" {
		for _, name := range []string{"main.py", "index.js", "index.mjs", "handler.py", "bootstrap"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
				entry = name
				break
			}
		}
		if entry == "" {
			return nil, nil, fmt.Errorf("%s has no main.py, index.js, index.mjs, handler.py or bootstrap: name the entrypoint with --entrypoint", dir)
		}
	}
	if runtime == "" {
		switch filepath.Ext(entry) {
		case ".py":
			runtime = bundle.Python
		case ".js", ".mjs", ".cjs":
			runtime = bundle.Node
		default:
			runtime = bundle.Binary
		}
	}
	var buf bytes.Buffer
	m, err := bundle.Build(dir, runtime, entry, allow, &buf)
	if err != nil {
		return nil, nil, err
	}
	return m, buf.Bytes(), nil
}

func udfUpload(ctx context.Context, c *jobCmd, args []string) int {
	c.outputFlag()
	pos, code, ok := c.parse(args, "FILE")
	if !ok {
		return code
	}
	var zip []byte
	if fi, err := os.Stat(pos[0]); err == nil && fi.IsDir() {
		if _, zip, err = buildBundle(pos[0], "", "", nil); err != nil {
			fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
			return 1
		}
	} else if zip, ok = c.readFile(pos[0], "the bundle"); !ok {
		return 1
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	b, err := cl.UploadBundle(ctx, zip)
	if err != nil {
		return c.fail(err)
	}
	return c.print(b, func() int {
		fmt.Fprintf(c.stdout, "%s: %s bundle, entrypoint %s, sha256 %s, %d bytes\n", b.BundleID, b.Language, b.Entrypoint, b.SHA256, b.Size)
		return 0
	})
}

func udfList(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, nil, func(cl *client.Client, _ []string) (*client.BundlePage, error) {
		return cl.ListBundles(ctx, 200, "")
	}, func(p *client.BundlePage) int {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BUNDLE ID\tSTATE\tLANGUAGE\tENTRYPOINT\tSIZE\tSHA256\tCREATED")
		for _, b := range p.Bundles {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", b.BundleID, b.State, b.Language, b.Entrypoint, b.Size,
				short(b.SHA256), b.CreatedAt.Format("2006-01-02 15:04:05"))
		}
		return flushTable(c, tw)
	})
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func udfGet(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"ID"}, func(cl *client.Client, pos []string) (*client.Bundle, error) { return cl.GetBundle(ctx, pos[0]) },
		func(b *client.Bundle) int { return printBundle(c, b) })
}

func udfDisable(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"ID"}, func(cl *client.Client, pos []string) (*client.Bundle, error) { return cl.DisableBundle(ctx, pos[0]) },
		func(b *client.Bundle) int { return printBundle(c, b) })
}

func printBundle(c *jobCmd, b *client.Bundle) int {
	fmt.Fprintf(c.stdout, "%s (%s)\nlanguage: %s\nentrypoint: %s\nsha256: %s\nsize: %d bytes\nuploaded: %s by key %s\n",
		b.BundleID, b.State, b.Language, b.Entrypoint, b.SHA256, b.Size, b.CreatedAt.Format("2006-01-02 15:04:05"), b.UploadedBy)
	if b.DisabledAt != nil {
		fmt.Fprintf(c.stdout, "disabled: %s by key %s\n", b.DisabledAt.Format("2006-01-02 15:04:05"), b.DisabledBy)
	}
	var m bundle.Manifest
	if json.Unmarshal(b.Manifest, &m) == nil && len(m.Files) > 0 {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FILE\tBYTES\tSHA256")
		for _, f := range m.Files {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", f.Path, f.Bytes, short(f.SHA256))
		}
		return flushTable(c, tw)
	}
	return 0
}
