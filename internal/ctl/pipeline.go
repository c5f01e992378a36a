package ctl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/cmdline"
)

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

const datasetUsage = `Usage: baton dataset <command> [flags]

Commands:
  list                                   the tenant's datasets
  get NAME                               a dataset (by name or uuid): versions, recent events
  cutover NAME --version V               make a registered version the current one
  rows NAME [--where JSON] [--cursor N] [--limit N] [--after N]
                                         a buffered dataset's rows, oldest first
  dead-letters NAME                      a buffered dataset's batches that failed every load
  retry NAME ID                          put a dead-lettered batch back on the Buffer Queue

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

// datasetCommands is the subcommands of `baton dataset`.
var datasetCommands = map[string]func(context.Context, *jobCmd, []string) int{
	"list":         datasetList,
	"get":          datasetGet,
	"cutover":      datasetCutover,
	"rows":         datasetRows,
	"dead-letters": datasetDeadLetters,
	"retry":        datasetRetry,
}

// RunPipeline runs "baton pipeline ...", and returns the exit status as RunJob does.
func RunPipeline(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "pipeline", pipelineUsage, pipelineCommands, args, stdout, stderr)
}

// RunDataset runs "baton dataset ...", and returns the exit status as RunJob does.
func RunDataset(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "dataset", datasetUsage, datasetCommands, args, stdout, stderr)
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

func datasetList(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, nil, func(cl *client.Client, _ []string) (DatasetListing, error) {
		ds, err := cl.ListDatasets(ctx)
		return DatasetListing{Datasets: ds}, err
	},
		func(ds DatasetListing) int {
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tDATASET UUID\tCURRENT VERSION\tPRODUCER")
			for _, d := range ds.Datasets {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", orDash(d.Name), d.DatasetUUID, d.CurrentVersion, producerText(d.Producer))
			}
			return flushTable(c, tw)
		})
}

func datasetGet(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) (*client.Dataset, error) { return cl.GetDataset(ctx, pos[0]) },
		func(d *client.Dataset) int { return printDataset(c, d) })
}

func printDataset(c *jobCmd, d *client.Dataset) int {
	fmt.Fprintf(c.stdout, "%s (%s)\nproducer: %s\ncurrent version: %s\nfilter fields: %s\n", orDash(d.Name), d.DatasetUUID,
		producerText(d.Producer), d.CurrentVersion, strings.Join(d.FilterFields, ", "))
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tCURRENT\tREGISTERED\tBY TASK")
	for _, v := range d.Versions {
		cur := ""
		if v.Current {
			cur = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.DatasetVersion, cur, v.CreatedAt.Format("2006-01-02 15:04:05"), orDash(v.TaskID))
	}
	if code := flushTable(c, tw); code != 0 {
		return code
	}
	if len(d.RecentEvents) > 0 {
		fmt.Fprintln(c.stdout, "recent events:")
		for _, e := range d.RecentEvents {
			at := ""
			switch {
			case e.PartitionKey != nil:
				at = "partition " + *e.PartitionKey
			case e.Cursor != nil:
				at = fmt.Sprintf("cursor %d", *e.Cursor)
			}
			fmt.Fprintf(c.stdout, "  %s %s version %s by task %s/%d\n", e.CreatedAt.Format("15:04:05"), at, e.DatasetVersion, e.TaskID, e.Attempt)
		}
	}
	return 0
}

func datasetCutover(ctx context.Context, c *jobCmd, args []string) int {
	version := c.fs.String("version", "", "the registered version to make current")
	c.outputFlag()
	pos, code, ok := c.parse(args, "NAME")
	if !ok {
		return code
	}
	if *version == "" {
		return c.usageError("--version V is required")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	d, err := cl.SetCurrentVersion(ctx, pos[0], *version)
	if err != nil {
		return c.fail(err)
	}
	return c.print(d, func() int {
		fmt.Fprintf(c.stdout, "%s: current version is now %s\n", orDash(d.Name), d.CurrentVersion)
		return 0
	})
}

// show runs a read command: its positional arguments (names), -o, one call of the API, and
// the answer as -o asks (text prints the table).
func show[T any](ctx context.Context, c *jobCmd, args, names []string, call func(*client.Client, []string) (T, error), text func(T) int) int {
	c.outputFlag()
	pos, code, ok := c.parse(args, names...)
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	v, err := call(cl, pos)
	if err != nil {
		return c.fail(err)
	}
	return c.print(v, func() int { return text(v) })
}

func producerText(p *client.DatasetProducer) string {
	if p == nil {
		return "buffered (many writers)"
	}
	return fmt.Sprintf("%s/%s output %d", p.Pipeline, p.Job, p.OutputIndex)
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func flushTable(c *jobCmd, tw *tabwriter.Writer) int {
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	return 0
}

func datasetRows(ctx context.Context, c *jobCmd, args []string) int {
	where := c.fs.String("where", "", `only rows matching this JSON object, e.g. '{"severity":"high"}' (AND of equality; a list is IN)`)
	cursor := c.fs.Int64("cursor", 0, "only the rows of the batch with this dataset cursor")
	limit := c.fs.Int("limit", 100, "rows per page (1 to 1000)")
	after := c.fs.Int64("after", 0, "the page after the one that printed this next_after")
	var q client.RowsQuery
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) (*client.RowsPage, error) {
		if *where != "" {
			dec := json.NewDecoder(strings.NewReader(*where))
			dec.UseNumber()
			if err := dec.Decode(&q.Where); err != nil || q.Where == nil {
				return nil, usageError{fmt.Sprintf(`--where must be a JSON object such as '{"severity":"high"}': %v`, err)}
			}
		}
		q.Cursor, q.Limit, q.After = *cursor, *limit, *after
		return cl.DatasetRows(ctx, pos[0], q)
	}, func(p *client.RowsPage) int {
		if len(p.Rows) == 0 {
			fmt.Fprintln(c.stderr, "no rows")
			return 0
		}
		cols := rowColumns(p.Rows)
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(cols, "\t")))
		for _, r := range p.Rows {
			cells := make([]string, len(cols))
			for i, col := range cols {
				cells[i] = cellText(r[col])
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		if code := flushTable(c, tw); code != 0 {
			return code
		}
		if p.NextAfter != nil {
			fmt.Fprintf(c.stderr, "more: --after %d\n", *p.NextAfter)
		}
		return 0
	})
}

// rowColumns is the columns of rows in a stable order: "_cursor" last, the others sorted.
func rowColumns(rows []map[string]any) []string {
	seen := map[string]bool{}
	var cols []string
	for _, r := range rows {
		for k := range r {
			if !seen[k] && k != "_cursor" {
				seen[k] = true
				cols = append(cols, k)
			}
		}
	}
	slices.Sort(cols)
	return append(cols, "_cursor")
}

func cellText(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func datasetDeadLetters(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) (DeadLetterListing, error) {
		bs, err := cl.BatchDeadLetters(ctx, pos[0])
		return DeadLetterListing{DeadLetters: bs}, err
	}, func(l DeadLetterListing) int {
		bs := l.DeadLetters
		if len(bs) == 0 {
			fmt.Fprintln(c.stderr, "no dead-lettered batches")
			return 0
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRECEIVES\tPUBLISHED\tLAST ERROR\tBATCH")
		for _, b := range bs {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", b.ID, b.ReceiveCount, b.CreatedAt.Format("2006-01-02 15:04:05"), orDash(b.LastError), b.BatchURI)
		}
		return flushTable(c, tw)
	})
}

func datasetRetry(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"NAME", "ID"}, func(cl *client.Client, pos []string) (*client.BufferBatch, error) {
		id, err := strconv.ParseInt(pos[1], 10, 64)
		if err != nil || id <= 0 {
			return nil, usageError{fmt.Sprintf("ID %q: want the id of a dead-lettered batch (baton dataset dead-letters NAME)", pos[1])}
		}
		return cl.RetryBatch(ctx, pos[0], id)
	}, func(b *client.BufferBatch) int {
		fmt.Fprintf(c.stdout, "batch %d is queued again\n", b.ID)
		return 0
	})
}
