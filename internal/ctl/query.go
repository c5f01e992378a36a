package ctl

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/baton-dev/baton/client"
)

const queryUsage = `Usage: baton query [--limit N] [-o table|json|csv] SQL
       baton query audit [--before ID] [--limit N] [-o table|json|yaml]

baton query runs one read-only SELECT (or WITH ... SELECT) over the tenant's published
datasets, each read as a table under its name at its current version; SQL "-" reads the
statement from stdin. The answer holds at most --limit rows (1 to 10000, default 1000) and
10 MiB; when the statement has more, stderr says the answer was truncated.
  baton query "SELECT severity, count(*) AS n FROM alert_events GROUP BY severity"
  baton query -o csv - < report.sql > report.csv

baton query audit lists the tenant's queries, newest first: who ran each, the SHA-256 of its
SQL (never the text), the dataset versions it read and how it ended.

Both take --url (env BATON_URL, default ` + DefaultURL + `) and --api-key (env BATON_API_KEY).
See docs/contracts/query.md.
`

// QueryCommands is the subcommands of `baton query`, which also runs a statement itself.
func QueryCommands() []string { return []string{"audit"} }

// RunQuery runs "baton query SQL" and "baton query audit", and returns the exit status as RunJob
// does.
func RunQuery(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "--help":
			fmt.Fprint(stdout, queryUsage)
			return 0
		case "audit":
			return queryAudit(ctx, newJobCmd(ctx, "query", "audit", stdout, stderr), args[1:])
		}
	}
	return queryRun(ctx, newJobCmd(ctx, "query", "", stdout, stderr), args)
}

func queryRun(ctx context.Context, c *jobCmd, args []string) int {
	limit := c.fs.Int("limit", 0, "rows answered, 1 to 10000 (server default 1000)")
	c.out = registerFormats(c.fs, OutputTable, OutputJSON, OutputCSV)
	c.fs.Usage = func() {
		fmt.Fprint(c.fs.Output(), queryUsage+"\nFlags:\n")
		c.fs.PrintDefaults()
	}
	pos, code, ok := c.parse(args, "SQL")
	if !ok {
		return code
	}
	if *limit < 0 || *limit > 10000 {
		return c.usageError("--limit must be from 1 to 10000")
	}
	text := pos[0]
	if text == "-" {
		b, ok := c.readFile("-", "the statement")
		if !ok {
			return 1
		}
		text = string(b)
	}
	if strings.TrimSpace(text) == "" {
		return c.usageError("the statement is empty: give one SELECT as the argument, or - to read it from stdin")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	var opts []client.QueryOption
	if *limit > 0 {
		opts = append(opts, client.WithRowLimit(*limit))
	}
	res, err := cl.Query(ctx, text, opts...)
	if err != nil {
		return c.failQuery(err)
	}
	if res.Truncated && *c.out != OutputJSON {
		fmt.Fprintf(c.stderr, "truncated: the statement has more rows than the %d answered (--limit, at most 10000, and 10 MiB)\n", res.RowCount)
	}
	switch *c.out {
	case OutputCSV:
		return queryCSV(c, res)
	case OutputJSON:
		return c.print(res, func() int { return 0 })
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	names := make([]string, len(res.Columns))
	for i, col := range res.Columns {
		names[i] = queryCell(col.Name)
	}
	fmt.Fprintln(tw, strings.Join(names, "\t"))
	for _, row := range res.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			if v == nil {
				cells[i] = "NULL"
			} else {
				cells[i] = queryCell(queryValue(v))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if code := flushTable(c, tw); code != 0 {
		return code
	}
	noun := "rows"
	if res.RowCount == 1 {
		noun = "row"
	}
	fmt.Fprintf(c.stderr, "(%d %s, %s)\n", res.RowCount, noun, res.Duration())
	return 0
}

// failQuery is fail, and a hint for the refusals whose fix is not the statement's.
func (c *jobCmd) failQuery(err error) int {
	code := c.fail(err)
	var e *client.APIError
	if !errors.As(err, &e) {
		return code
	}
	switch e.Code {
	case client.CodeQueryUnavailable:
		fmt.Fprintln(c.stderr, "The server was built without cgo (CGO_ENABLED=0), so it has no query engine: run a baton server built with cgo to query datasets.")
	case client.CodeQueryBusy:
		fmt.Fprintln(c.stderr, "Every query slot of the server stayed taken; try again shortly.")
	case client.CodeQueryTimeout:
		fmt.Fprintln(c.stderr, "A query with an API key may run 60 s: select fewer rows or columns, or aggregate more.")
	}
	return code
}

// queryCSV writes res as CSV: a header of the column names, then each row; NULL is an empty
// field, a string its text, a number its digits, a list or object its JSON.
func queryCSV(c *jobCmd, res *client.QueryResult) int {
	w := csv.NewWriter(c.stdout)
	header := make([]string, len(res.Columns))
	for i, col := range res.Columns {
		header[i] = col.Name
	}
	_ = w.Write(header)
	for _, row := range res.Rows {
		rec := make([]string, len(row))
		for i, v := range row {
			if v != nil {
				rec[i] = queryValue(v)
			}
		}
		_ = w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	return 0
}

// queryValue is a value of a row as text: a string as it is, a number's digits, a boolean, and a
// list or object as compact JSON.
func queryValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// queryCell is s as a table cell: quoted when it holds a tab, a line break or another control
// character, which would break the table's lines and columns.
func queryCell(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func queryAudit(ctx context.Context, c *jobCmd, args []string) int {
	before := c.fs.Int64("before", 0, "only queries older than this id: the next_before a previous page printed")
	limit := c.fs.Int("limit", 0, "queries per page, 1 to 1000 (server default 100)")
	return show(ctx, c, args, nil, func(cl *client.Client, _ []string) (*client.QueryAuditPage, error) {
		if *before < 0 || *limit < 0 {
			return nil, usageError{"--before and --limit must be positive"}
		}
		return cl.QueryAudit(ctx, client.QueryAuditOptions{Before: *before, Limit: *limit})
	}, func(p *client.QueryAuditPage) int {
		if len(p.Queries) == 0 {
			fmt.Fprintln(c.stderr, "no queries")
			return 0
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAT\tCALLER\tSTATUS\tROWS\tDURATION\tSQL SHA-256\tDATASETS")
		for _, q := range p.Queries {
			read := make([]string, len(q.Datasets))
			for i, d := range q.Datasets {
				read[i] = d.Name
				if d.Version != "" {
					read[i] += "@" + d.Version
				}
			}
			datasets := strings.Join(read, " ")
			if datasets == "" {
				datasets = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", q.ID, q.At.Local().Format("2006-01-02 15:04:05"), q.Caller, q.Status,
				q.RowCount, time.Duration(q.DurationMS)*time.Millisecond, q.SQLSHA256[:min(12, len(q.SQLSHA256))], datasets)
		}
		if code := flushTable(c, tw); code != 0 {
			return code
		}
		if p.NextBefore != nil {
			fmt.Fprintf(c.stderr, "more: --before %d\n", *p.NextBefore)
		}
		return 0
	})
}
