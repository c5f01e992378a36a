package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/baton-dev/baton/client"
)

// baton dataset: a tenant's datasets, their versions, rows and dead-lettered batches, through the
// producer API.

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

// datasetCommands is the subcommands of `baton dataset`.
var datasetCommands = map[string]func(context.Context, *jobCmd, []string) int{
	"list":         datasetList,
	"get":          datasetGet,
	"cutover":      datasetCutover,
	"rows":         datasetRows,
	"dead-letters": datasetDeadLetters,
	"retry":        datasetRetry,
}

// RunDataset runs "baton dataset ...", and returns the exit status as RunJob does.
func RunDataset(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "dataset", datasetUsage, datasetCommands, args, stdout, stderr)
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

func producerText(p *client.DatasetProducer) string {
	if p == nil {
		return "buffered (many writers)"
	}
	return fmt.Sprintf("%s/%s output %d", p.Pipeline, p.Job, p.OutputIndex)
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
