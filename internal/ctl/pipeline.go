package ctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/cmdline"
)

// baton pipeline: deploys, versions, builds, activation, abandon and rollback of a tenant's
// pipelines, and runs of their source jobs, through the producer API.

const pipelineUsage = `Usage: baton pipeline <command> [flags]

Commands:
  deploy -f FILE [--activate MODE]
                                   deploy a DAG document, YAML or JSON; "-" reads stdin;
                                   stdout: the deployed version alone, stderr: the details.
                                   A change of what a job writes is built beside the active
                                   version; MODE says when it takes over: manual (the
                                   default: activate it), when_ready, or immediate (no build)
  list                             the tenant's pipelines
  get NAME                         the active version's jobs, their datasets and task counts,
                                   and the build of the version being built, if any
  versions NAME                    every deployed version and its state, newest first
  activate NAME VERSION [--force]  make the version being built active, with the datasets
                                   it rebuilt (--force: before its build is ready)
  abandon NAME VERSION             stop building a version; the active one stays
  rollback NAME [--version V]      make an earlier version active (default: the previous one)

Every command takes --url (env BATON_URL, default ` + DefaultURL + `),
--api-key (env BATON_API_KEY) and -o table|json|yaml (--json: -o json).
`

// pipelineCommands is the subcommands of `baton pipeline`.
var pipelineCommands = map[string]func(context.Context, *jobCmd, []string) int{
	"deploy":   pipelineDeploy,
	"list":     pipelineList,
	"get":      pipelineGet,
	"versions": pipelineVersions,
	"activate": pipelineActivate,
	"abandon":  pipelineAbandon,
	"rollback": pipelineRollback,
}

// RunPipeline runs "baton pipeline ...", and returns the exit status as RunJob does.
func RunPipeline(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "pipeline", pipelineUsage, pipelineCommands, args, stdout, stderr)
}

// The API's list envelopes, which -o json and yaml print as the API answers them.
type (
	// PipelineListing is what `baton pipeline list` prints.
	PipelineListing struct {
		Pipelines []client.Pipeline `json:"pipelines"`
	}
	// PipelineVersionListing is what `baton pipeline versions` prints.
	PipelineVersionListing struct {
		Name          string                   `json:"name"`
		ActiveVersion string                   `json:"active_version"`
		Versions      []client.PipelineVersion `json:"versions"`
	}
	// DatasetListing is what `baton dataset list` prints.
	DatasetListing struct {
		Datasets []client.Dataset `json:"datasets"`
	}
	// DeadLetterListing is what `baton dataset dead-letters` prints.
	DeadLetterListing struct {
		DeadLetters []client.BufferBatch `json:"dead_letters"`
	}
)

// runGroup dispatches to one command of a group.
func runGroup(ctx context.Context, group, usage string, cmds map[string]func(context.Context, *jobCmd, []string) int,
	args []string, stdout, stderr io.Writer) int {
	cmd, code, ok := cmdline.Subcommand(group, usage, slices.Collect(maps.Keys(cmds)), args, stdout, stderr)
	if !ok {
		return code
	}
	return cmds[cmd](ctx, newJobCmd(ctx, group, cmd, stdout, stderr), args[1:])
}

// activateModes are the values of deploy --activate.
var activateModes = []string{client.ActivateManual, client.ActivateWhenReady, client.ActivateImmediate}

// choiceValue is a string flag that takes one of a fixed set of values, which completion offers.
type choiceValue struct {
	v       *string
	choices []string
}

func (c *choiceValue) String() string {
	if c == nil || c.v == nil {
		return ""
	}
	return *c.v
}

func (c *choiceValue) Set(v string) error {
	if !slices.Contains(c.choices, v) {
		return fmt.Errorf("want %s or %s", strings.Join(c.choices[:len(c.choices)-1], ", "), c.choices[len(c.choices)-1])
	}
	*c.v = v
	return nil
}

// Formats is the values the flag takes, for completion.
func (c *choiceValue) Formats() []string { return c.choices }

func pipelineDeploy(ctx context.Context, c *jobCmd, args []string) int {
	file := c.fs.String("f", "", "the DAG document, YAML or JSON (\"-\" reads stdin)")
	var activate string
	c.fs.Var(&choiceValue{&activate, activateModes}, "activate", "when a new version whose change needs a build takes over, `MODE`: "+
		"manual (the server's default; then baton pipeline activate), when_ready (once built) or immediate (at once, no build)")
	cl, body, code, ok := c.upload(args, file, "the document")
	if !ok {
		return code
	}
	ct := "application/yaml"
	if strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
		ct = "application/json" // JSON's own parser, for its error positions
	}
	var opts []client.DeployOption
	if activate != "" {
		opts = append(opts, client.WithActivate(activate))
	}
	p, err := cl.DeployPipeline(ctx, body, ct, opts...)
	if err != nil {
		return c.fail(err)
	}
	// The version alone on stdout (what `activate` and `rollback --version` take); the rest is
	// for people.
	building := p.State == client.BuildBuilding || p.State == client.BuildReady
	switch {
	case building && p.Created:
		fmt.Fprintf(c.stderr, "deployed %s version %s (new, %s beside active version %s)\n", p.Name, p.Version, p.State, p.ActiveVersion)
	case building:
		fmt.Fprintf(c.stderr, "%s version %s is already being built (%s); nothing changed\n", p.Name, p.Version, p.State)
	case p.Created:
		fmt.Fprintf(c.stderr, "deployed %s version %s (new, active)\n", p.Name, p.Version)
	case p.Activated:
		fmt.Fprintf(c.stderr, "deployed %s version %s (deployed before; active again)\n", p.Name, p.Version)
	default:
		fmt.Fprintf(c.stderr, "%s version %s is already active; nothing changed\n", p.Name, p.Version)
	}
	if p.Abandoned != nil {
		fmt.Fprintf(c.stderr, "abandoned the build of version %s; %d of its jobs were canceled\n", p.Abandoned.Version, p.Abandoned.CanceledJobs)
	}
	if building && p.Build != nil && p.Build.Version == p.Version {
		if code := printBuild(c, c.stderr, p.Build); code != 0 {
			return code
		}
		switch {
		case p.Build.Activate == client.ActivateWhenReady:
			fmt.Fprintln(c.stderr, "it becomes active by itself once its build is ready")
		case p.Build.Ready():
			fmt.Fprintf(c.stderr, "make it active: baton pipeline activate %s %s\n", p.Name, p.Version)
		default:
			fmt.Fprintf(c.stderr, "follow the build with 'baton pipeline get %s'; once it is ready: baton pipeline activate %s %s\n", p.Name, p.Name, p.Version)
		}
	} else if code := printPipelineJobs(c, c.stderr, p.Jobs); code != 0 {
		return code
	}
	return c.print(p, func() int {
		fmt.Fprintln(c.stdout, p.Version)
		return 0
	})
}

func pipelineList(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, nil, func(cl *client.Client, _ []string) (PipelineListing, error) {
		ps, err := cl.ListPipelines(ctx)
		return PipelineListing{Pipelines: ps}, err
	},
		func(ps PipelineListing) int {
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tACTIVE VERSION\tBUILDING VERSION\tUPDATED")
			for _, p := range ps.Pipelines {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.ActiveVersion, orDash(p.BuildingVersion), p.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return flushTable(c, tw)
		})
}

func pipelineGet(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) (*client.Pipeline, error) { return cl.GetPipeline(ctx, pos[0]) },
		func(p *client.Pipeline) int {
			fmt.Fprintf(c.stdout, "%s: active version %s, updated %s\n", p.Name, p.ActiveVersion, p.UpdatedAt.Format("2006-01-02 15:04:05"))
			if code := printPipelineJobs(c, c.stdout, p.Jobs); code != 0 || p.Build == nil {
				return code
			}
			fmt.Fprintln(c.stdout)
			return printBuild(c, c.stdout, p.Build)
		})
}

// printBuild shows a build: its state, each rebuilt job with why and its tasks, each rebuilt
// dataset's current and candidate version, and the jobs that change at activation instead.
func printBuild(c *jobCmd, w io.Writer, b *client.PipelineBuild) int {
	state := b.State
	if b.ReadyAt != nil {
		state += " since " + b.ReadyAt.Local().Format("2006-01-02 15:04:05")
	}
	fmt.Fprintf(w, "build of version %s: %s (base version %s, activate %s)\n", b.Version, state, b.BaseVersion, b.Activate)
	switch {
	case b.Backfill.Scanned:
		fmt.Fprintf(w, "backfill: done, through event %d\n", b.Backfill.ThroughEvent)
	case b.Backfill.ThroughEvent > 0:
		fmt.Fprintf(w, "backfill: under way, through event %d\n", b.Backfill.ThroughEvent)
	default:
		fmt.Fprintln(w, "backfill: not begun")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REBUILT JOB\tREASON\tROUTED\tWAITING\tPENDING\tRUNNING\tCOMPLETED\tFAILED\tCANCELED")
	for _, j := range b.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", j.Name, j.Reason, j.Counts["routed"], j.Counts["waiting"],
			j.Counts["pending"], j.Counts["running"], j.Counts["completed"], j.Counts["failed"], j.Counts["canceled"])
	}
	if code := flushTable(c, tw); code != 0 {
		return code
	}
	if len(b.Datasets) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REBUILT DATASET\tCURRENT VERSION -> CANDIDATE VERSION")
		for _, d := range b.Datasets {
			name := d.DatasetUUID
			if d.DatasetName != "" {
				name = d.DatasetName + " (" + d.DatasetUUID + ")"
			}
			fmt.Fprintf(tw, "%s\t%s -> %s\n", name, d.CurrentVersion, d.CandidateVersion)
		}
		if code := flushTable(c, tw); code != 0 {
			return code
		}
	}
	for _, job := range slices.Sorted(maps.Keys(b.Switched)) {
		fmt.Fprintf(w, "changes at activation, not rebuilt: %s: %s\n", job, b.Switched[job])
	}
	failed := 0
	for _, j := range b.Jobs {
		failed += j.Counts["failed"]
	}
	if failed > 0 && !b.Ready() {
		tasks := fmt.Sprintf("%d tasks of the build", failed)
		if failed == 1 {
			tasks = "a task of the build"
		}
		fmt.Fprintf(w, "%s failed for good: it stays building; deploy a fix, abandon it "+
			"(baton pipeline abandon), or activate it as it is with --force\n", tasks)
	}
	return 0
}

func printPipelineJobs(c *jobCmd, w io.Writer, jobs []client.PipelineJob) int {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tACTIVATION\tRUNTIME\tOPERATOR\tOUTPUTS\tROUTED\tWAITING\tPENDING\tRUNNING\tFAILED")
	for _, j := range jobs {
		outs := make([]string, len(j.Outputs))
		for i, o := range j.Outputs {
			outs[i] = fmt.Sprintf("%d=%s", o.OutputIndex, o.DatasetUUID)
			if o.DatasetName != "" {
				outs[i] += "(" + o.DatasetName + ")"
			}
		}
		activation := j.Activation
		if j.Source != "" {
			activation += "/" + j.Source
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", j.Name, activation, j.Runtime, j.Operator,
			strings.Join(outs, " "), j.Counts["routed"], j.Counts["waiting"], j.Counts["pending"], j.Counts["running"], j.Counts["failed"])
	}
	return flushTable(c, tw)
}

func pipelineVersions(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) (PipelineVersionListing, error) {
		vs, err := cl.PipelineVersions(ctx, pos[0])
		l := PipelineVersionListing{Name: pos[0], Versions: vs}
		for _, v := range vs {
			if v.Active {
				l.ActiveVersion = v.Version
			}
		}
		return l, err
	}, func(l PipelineVersionListing) int {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tACTIVE\tSTATE\tDEPLOYED")
		for _, v := range l.Versions {
			active := ""
			if v.Active {
				active = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Version, active, cmp.Or(v.State, "-"), v.CreatedAt.Format("2006-01-02 15:04:05"))
		}
		return flushTable(c, tw)
	})
}

func pipelineRollback(ctx context.Context, c *jobCmd, args []string) int {
	version := c.fs.String("version", "", "the version to make active (default: the one deployed before the active one)")
	c.outputFlag()
	pos, code, ok := c.parse(args, "NAME")
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	res, err := cl.RollbackPipeline(ctx, pos[0], *version)
	if err != nil {
		return c.fail(err)
	}
	return c.print(res, func() int {
		if !res.Activated {
			fmt.Fprintf(c.stdout, "%s version %s is already active; nothing changed\n", res.Name, res.ActiveVersion)
			return 0
		}
		fmt.Fprintf(c.stdout, "%s: version %s is active; %d jobs of other versions were canceled or asked to stop\n", res.Name, res.ActiveVersion, res.CanceledJobs)
		return 0
	})
}

// versionArgs parses the NAME VERSION of activate and abandon.
func versionArgs(c *jobCmd, args []string) (name, version string, code int, ok bool) {
	c.outputFlag()
	pos, code, ok := c.parse(args, "NAME", "VERSION")
	if !ok {
		return "", "", code, false
	}
	if strings.TrimSpace(pos[0]) == "" || strings.TrimSpace(pos[1]) == "" {
		return "", "", c.usageError("NAME and VERSION must not be empty (baton pipeline versions NAME lists the versions)"), false
	}
	return pos[0], pos[1], 0, true
}

func pipelineActivate(ctx context.Context, c *jobCmd, args []string) int {
	force := c.fs.Bool("force", false, "activate the version even if its build is not ready: the rebuilt datasets become current as far as the build has come, and the rest of its backfill is dropped")
	name, version, code, ok := versionArgs(c, args)
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	res, err := cl.ActivatePipelineVersion(ctx, name, version, *force)
	if err != nil {
		code := c.fail(err)
		var e *client.APIError
		if errors.As(err, &e) && e.Status == http.StatusConflict && !*force {
			// Say how far the build has come, when it is that version's.
			if p, err := cl.GetPipeline(ctx, name); err == nil && p.Build != nil && p.Build.Version == version && !p.Build.Ready() {
				fmt.Fprintf(c.stderr, "Its build is not ready yet: follow it with 'baton pipeline get %s', or activate it now with --force.\n", name)
			}
		}
		return code
	}
	return c.print(res, func() int {
		fmt.Fprintf(c.stdout, "%s: version %s is active; %d jobs of the version it replaced were canceled\n", res.Name, res.ActiveVersion, res.CanceledJobs)
		return 0
	})
}

func pipelineAbandon(ctx context.Context, c *jobCmd, args []string) int {
	name, version, code, ok := versionArgs(c, args)
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	res, err := cl.AbandonPipelineVersion(ctx, name, version)
	if err != nil {
		return c.fail(err)
	}
	return c.print(res, func() int {
		fmt.Fprintf(c.stdout, "%s: the build of version %s is abandoned; %d of its jobs were canceled\n", res.Name, res.Version, res.CanceledJobs)
		return 0
	})
}
