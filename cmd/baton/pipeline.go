package main

import (
	"context"
	"fmt"
	"io"

	"strings"
	"text/tabwriter"

	"github.com/baton-dev/baton/client"
)

const pipelineUsage = `Usage: baton pipeline <command> [flags]

Commands:
  deploy -f FILE [--json]          deploy a DAG document, YAML or JSON; "-" reads stdin
  list [--json]                    the tenant's pipelines
  get NAME [--json]                the active version's jobs, their datasets and task counts
  versions NAME [--json]           every deployed version, newest first
  rollback NAME [--version V]      make an earlier version active (default: the previous one)

Every command takes --url (env BATON_URL, default ` + jobDefaultURL + `) and
--api-key (env BATON_API_KEY).
`

const datasetUsage = `Usage: baton dataset <command> [flags]

Commands:
  list [--json]                          the tenant's datasets
  get NAME [--json]                      a dataset (by name or uuid): versions, recent events
  cutover NAME --version V [--json]      make a registered version the current one

Every command takes --url (env BATON_URL, default ` + jobDefaultURL + `) and
--api-key (env BATON_API_KEY).
`

// runPipeline runs "baton pipeline ...".
func runPipeline(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "pipeline", pipelineUsage, map[string]func(context.Context, *jobCmd, []string) int{
		"deploy":   pipelineDeploy,
		"list":     pipelineList,
		"get":      pipelineGet,
		"versions": pipelineVersions,
		"rollback": pipelineRollback,
	}, args, stdout, stderr)
}

// runDataset runs "baton dataset ...".
func runDataset(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "dataset", datasetUsage, map[string]func(context.Context, *jobCmd, []string) int{
		"list":    datasetList,
		"get":     datasetGet,
		"cutover": datasetCutover,
	}, args, stdout, stderr)
}

// runGroup dispatches to one command of a group.
func runGroup(ctx context.Context, group, usage string, cmds map[string]func(context.Context, *jobCmd, []string) int,
	args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fn, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "baton %s: unknown command %q\n\n%s", group, args[0], usage)
		return 2
	}
	return fn(ctx, newJobCmd(group, args[0], stdout, stderr), args[1:])
}

func pipelineDeploy(ctx context.Context, c *jobCmd, args []string) int {
	file := c.fs.String("f", "", "the DAG document, YAML or JSON (\"-\" reads stdin)")
	asJSON := c.fs.Bool("json", false, "print the server's answer as JSON")
	if _, code, ok := c.parse(args); !ok {
		return code
	}
	if *file == "" {
		return c.usageError("-f FILE is required")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	body, ok := c.readFile(*file, "the document")
	if !ok {
		return 1
	}
	ct := "application/yaml"
	if strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
		ct = "application/json" // JSON's own parser, for its error positions
	}
	p, err := cl.DeployPipeline(ctx, body, ct)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(p)
	}
	switch {
	case p.Created:
		fmt.Fprintf(c.stdout, "deployed %s version %s (new, active)\n", p.Name, p.Version)
	case p.Activated:
		fmt.Fprintf(c.stdout, "deployed %s version %s (deployed before; active again)\n", p.Name, p.Version)
	default:
		fmt.Fprintf(c.stdout, "%s version %s is already active; nothing changed\n", p.Name, p.Version)
	}
	return printPipelineJobs(c, p.Jobs)
}

func pipelineList(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, nil, func(cl *client.Client, _ []string) ([]client.Pipeline, error) { return cl.ListPipelines(ctx) },
		func(ps []client.Pipeline) int {
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tACTIVE VERSION\tUPDATED")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.ActiveVersion, p.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return flushTable(c, tw)
		})
}

func pipelineGet(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) (*client.Pipeline, error) { return cl.GetPipeline(ctx, pos[0]) },
		func(p *client.Pipeline) int {
			fmt.Fprintf(c.stdout, "%s: active version %s, updated %s\n", p.Name, p.ActiveVersion, p.UpdatedAt.Format("2006-01-02 15:04:05"))
			return printPipelineJobs(c, p.Jobs)
		})
}

func printPipelineJobs(c *jobCmd, jobs []client.PipelineJob) int {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
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
	return show(ctx, c, args, []string{"NAME"}, func(cl *client.Client, pos []string) ([]client.PipelineVersion, error) {
		return cl.PipelineVersions(ctx, pos[0])
	}, func(vs []client.PipelineVersion) int {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tACTIVE\tDEPLOYED")
		for _, v := range vs {
			active := ""
			if v.Active {
				active = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Version, active, v.CreatedAt.Format("2006-01-02 15:04:05"))
		}
		return flushTable(c, tw)
	})
}

func pipelineRollback(ctx context.Context, c *jobCmd, args []string) int {
	version := c.fs.String("version", "", "the version to make active (default: the one deployed before the active one)")
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
	if !res.Activated {
		fmt.Fprintf(c.stdout, "%s version %s is already active; nothing changed\n", res.Name, res.ActiveVersion)
		return 0
	}
	fmt.Fprintf(c.stdout, "%s: version %s is active; %d jobs that had not started were canceled\n", res.Name, res.ActiveVersion, res.CanceledJobs)
	return 0
}

func datasetList(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, nil, func(cl *client.Client, _ []string) ([]client.Dataset, error) { return cl.ListDatasets(ctx) },
		func(ds []client.Dataset) int {
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tDATASET UUID\tCURRENT VERSION\tPRODUCER")
			for _, d := range ds {
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
	asJSON := c.fs.Bool("json", false, "print the server's answer as JSON")
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
	if *asJSON {
		return c.printJSON(d)
	}
	fmt.Fprintf(c.stdout, "%s: current version is now %s\n", orDash(d.Name), d.CurrentVersion)
	return 0
}

// show runs a read command: its positional arguments (names), --json, one call of the API, and
// the answer as JSON or as text.
func show[T any](ctx context.Context, c *jobCmd, args, names []string, call func(*client.Client, []string) (T, error), text func(T) int) int {
	asJSON := c.fs.Bool("json", false, "print the server's answer as JSON")
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
	if *asJSON {
		return c.printJSON(v)
	}
	return text(v)
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
		fmt.Fprintf(c.stderr, "baton %s %s: %v\n", c.group, c.name, err)
		return 1
	}
	return 0
}
