package ctl

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/cmdline"
)

const jobUsage = `Usage: baton job <command> [flags]

Commands:
  submit -f FILE [--idempotency-key K]   submit a job; FILE "-" reads stdin; stdout: the job id
  list [--status S] [--limit N] [--cursor C]
  get ID                                 a job's status and tasks
  cancel ID                              cancel a processing job
  resume ID                              rerun a finished job's failed tasks
  watch ID [--interval 500ms]            follow a job until it finishes (exit 1 unless it completed)

Every command takes --url (env BATON_URL, default ` + DefaultURL + `) and
--api-key (env BATON_API_KEY); all but watch take -o table|json|yaml (--json: -o json).
`

// jobCommands is the subcommands of `baton job`.
var jobCommands = map[string]func(context.Context, *jobCmd, []string) int{
	"submit": jobSubmit,
	"list":   jobList,
	"get":    jobGet,
	"cancel": jobCancel,
	"resume": jobResume,
	"watch":  jobWatch,
}

// RunJob runs "baton job ...": the producer API from the command line. It returns the exit
// status: 0 success, 1 failure, 2 usage.
func RunJob(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "job", jobUsage, jobCommands, args, stdout, stderr)
}

// jobCmd holds what every job subcommand shares: its flags, the connection flags among them,
// and its output.
type jobCmd struct {
	cmd            string // "baton job submit", "baton query": what messages begin with
	fs             *flag.FlagSet
	url, key       string
	out            *Output // -o, when the command has it
	stdout, stderr io.Writer
	ctx            context.Context // cmdline.DefinedFlags's: hand the flag set over instead of running
}

func newJobCmd(ctx context.Context, group, name string, stdout, stderr io.Writer) *jobCmd {
	c := &jobCmd{cmd: strings.TrimSpace("baton " + group + " " + name), stdout: stdout, stderr: stderr, ctx: ctx}
	c.fs = flag.NewFlagSet(c.cmd, flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.url, "url", "", "server URL (env BATON_URL, default "+DefaultURL+")")
	// No default shown: the key comes from the environment and must not appear in help text.
	c.fs.StringVar(&c.key, "api-key", "", "API key (env BATON_API_KEY)")
	return c
}

// parse parses flags placed before, between or after the positional arguments and checks that
// there are exactly len(names) of the latter. It returns false and the exit code when the command
// must stop.
func (c *jobCmd) parse(args []string, names ...string) ([]string, int, bool) {
	pos, code, ok := cmdline.ParseWords(c.ctx, c.fs, args)
	if !ok {
		return nil, code, false
	}
	if len(pos) != len(names) {
		want := "no arguments"
		if len(names) > 0 {
			want = strings.Join(names, " ")
		}
		return nil, c.usageError("expected %s, got %q", want, pos), false
	}
	return pos, 0, true
}

// usageError is a usage mistake found while running a command: fail prints it and returns 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usageError prints a usage mistake and returns exit status 2.
func (c *jobCmd) usageError(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.cmd, fmt.Sprintf(format, args...))
	fmt.Fprintf(c.stderr, "Run '%s -h' for usage.\n", c.cmd)
	return 2
}

// client returns a client configured from the flags and the environment, or false and exit
// status 2 when there is no API key.
func (c *jobCmd) client() (*client.Client, int, bool) {
	key := cmp.Or(c.key, os.Getenv("BATON_API_KEY"))
	if key == "" {
		fmt.Fprintf(c.stderr, "%s: no API key: set BATON_API_KEY or pass --api-key\n", c.cmd)
		return nil, 2, false
	}
	url := cmp.Or(c.url, os.Getenv("BATON_URL"), DefaultURL)
	return client.New(url, key, client.WithUserAgent("baton-cli/"+Version)), 0, true
}

// fail prints an error of the API, with every validation failure the server listed, and returns
// exit status 1.
func (c *jobCmd) fail(err error) int {
	var e *client.APIError
	var usage usageError
	if errors.As(err, &usage) {
		return c.usageError("%s", usage.msg)
	}
	if !errors.As(err, &e) {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	if len(e.Errors) > 1 {
		fmt.Fprintf(c.stderr, "%s: the server refused the request (HTTP %d):\n", c.cmd, e.Status)
		for _, m := range e.Errors {
			fmt.Fprintf(c.stderr, "  - %s\n", m)
		}
		return 1
	}
	msg := e.Message
	if len(e.Errors) == 1 && e.Errors[0] != msg {
		msg += ": " + e.Errors[0]
	}
	status := strconv.Itoa(e.Status)
	if e.Code != "" {
		status += " " + e.Code
	}
	fmt.Fprintf(c.stderr, "%s: %s (HTTP %s)\n", c.cmd, msg, status)
	if e.Status == http.StatusUnauthorized {
		fmt.Fprintf(c.stderr, "Check BATON_API_KEY or --api-key.\n")
	}
	return 1
}

// readFile reads the file a -f flag names ("-": stdin), or prints why it cannot and returns false.
func (c *jobCmd) readFile(path, what string) ([]byte, bool) {
	var body []byte
	var err error
	if path == "-" {
		body, err = io.ReadAll(Stdin)
	} else {
		body, err = os.ReadFile(path)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: read %s: %v\n", c.cmd, what, err)
		return nil, false
	}
	return body, true
}

// upload runs the start of a command that sends a file (-f): -o, no positional arguments, the
// file required, a client, and the file's bytes (what names it in messages). When ok is false
// the command exits with code.
func (c *jobCmd) upload(args []string, file *string, what string) (cl *client.Client, body []byte, code int, ok bool) {
	c.outputFlag()
	if _, code, ok := c.parse(args); !ok {
		return nil, nil, code, false
	}
	if *file == "" {
		return nil, nil, c.usageError("-f FILE is required"), false
	}
	if cl, code, ok = c.client(); !ok {
		return nil, nil, code, false
	}
	if body, ok = c.readFile(*file, what); !ok {
		return nil, nil, 1, false
	}
	return cl, body, 0, true
}

// outputFlag defines -o (and --output, --json) on the command's flags.
func (c *jobCmd) outputFlag() {
	c.out = RegisterOutput(c.fs)
}

// print writes v, the API's answer, as -o asks: text prints the table format.
func (c *jobCmd) print(v any, text func() int) int {
	code := 0
	err := WriteOutput(c.stdout, *c.out, v, func() error {
		code = text()
		return nil
	})
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	return code
}

func jobSubmit(ctx context.Context, c *jobCmd, args []string) int {
	file := c.fs.String("f", "", "the job request, a JSON file (\"-\" reads stdin)")
	key := c.fs.String("idempotency-key", "", "submit at most once with this key: a repeat returns the first job")
	cl, body, code, ok := c.upload(args, file, "the job request")
	if !ok {
		return code
	}
	var opts []client.SubmitOption
	if *key != "" {
		opts = append(opts, client.WithIdempotencyKey(*key))
	}
	res, err := cl.SubmitJobJSON(ctx, body, opts...)
	if err != nil {
		return c.fail(err)
	}
	// The id alone on stdout, for JOB=$(baton job submit ...); the rest is for people.
	fmt.Fprintf(c.stderr, "job %s: %d tasks; root tasks: %s\n", res.JobID, res.TotalTasks, strings.Join(res.RootTasks, ", "))
	if res.Replayed {
		fmt.Fprintln(c.stderr, "(replayed: an earlier submission with this idempotency key created the job)")
	}
	return c.print(res, func() int {
		fmt.Fprintln(c.stdout, res.JobID)
		return 0
	})
}

func jobList(ctx context.Context, c *jobCmd, args []string) int {
	status := c.fs.String("status", "", "only jobs in this status: processing, completed, partial_failure, canceled")
	limit := c.fs.Int("limit", 0, "jobs per page, 1 to 100 (server default 20)")
	cursor := c.fs.String("cursor", "", "the next cursor a previous page printed")
	c.outputFlag()
	if _, code, ok := c.parse(args); !ok {
		return code
	}
	if *limit < 0 {
		return c.usageError("--limit must be positive")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	page, err := cl.ListJobs(ctx, client.ListOptions{Limit: *limit, Cursor: *cursor, Status: *status})
	if err != nil {
		return c.fail(err)
	}
	return c.print(page, func() int {
		if len(page.Jobs) == 0 {
			fmt.Fprintln(c.stdout, "no jobs")
		} else {
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB ID\tSTATUS\tTASKS\tCREATED")
			for _, j := range page.Jobs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", j.JobID, j.Status, j.TotalTasks, jobTime(j.CreatedAt))
			}
			tw.Flush()
		}
		if page.NextCursor != "" {
			fmt.Fprintf(c.stdout, "next cursor: %s\n", page.NextCursor)
		}
		return 0
	})
}

func jobGet(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"JOB_ID"}, func(cl *client.Client, pos []string) (*client.Job, error) {
		return cl.GetJob(ctx, pos[0])
	}, func(job *client.Job) int { return printJob(c, job) })
}

func printJob(c *jobCmd, job *client.Job) int {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Job:\t%s\n", job.JobID)
	if job.Name != "" {
		fmt.Fprintf(tw, "Name:\t%s\n", job.Name)
	}
	fmt.Fprintf(tw, "Status:\t%s\n", job.Status)
	fmt.Fprintf(tw, "Tasks:\t%d (%s)\n", job.TotalTasks, jobCounts(job.Progress))
	fmt.Fprintf(tw, "Created:\t%s\n", jobTime(job.CreatedAt))
	if job.CompletedAt != nil {
		fmt.Fprintf(tw, "Finished:\t%s\n", jobTime(*job.CompletedAt))
	}
	tw.Flush()
	fmt.Fprintln(c.stdout)
	tw = tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATUS\tATTEMPT\tLAST EVENT")
	for _, t := range job.Tasks {
		last := "-"
		if t.LastEventType != "" {
			last = t.LastEventType
			if t.LastEventAt != nil {
				last += " at " + jobTime(*t.LastEventAt)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.TaskID, t.Status, t.Attempt, last)
	}
	tw.Flush()
	return 0
}

func jobCancel(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"JOB_ID"}, func(cl *client.Client, pos []string) (*client.JobSummary, error) {
		return cl.CancelJob(ctx, pos[0])
	}, func(res *client.JobSummary) int {
		if res.Status == client.JobProcessing {
			fmt.Fprintf(c.stdout, "job %s: cancel requested; running tasks are being stopped\n", res.JobID)
		} else {
			fmt.Fprintf(c.stdout, "job %s: %s\n", res.JobID, res.Status)
		}
		return 0
	})
}

func jobResume(ctx context.Context, c *jobCmd, args []string) int {
	return show(ctx, c, args, []string{"JOB_ID"}, func(cl *client.Client, pos []string) (*client.JobSummary, error) {
		return cl.ResumeJob(ctx, pos[0])
	}, func(res *client.JobSummary) int {
		fmt.Fprintf(c.stdout, "job %s: %s; resumed %d tasks: %s\n", res.JobID, res.Status, len(res.ResumedTasks), strings.Join(res.ResumedTasks, ", "))
		return 0
	})
}

func jobWatch(ctx context.Context, c *jobCmd, args []string) int {
	interval := c.fs.Duration("interval", 500*time.Millisecond, "how often to poll the job")
	pos, code, ok := c.parse(args, "JOB_ID")
	if !ok {
		return code
	}
	if *interval <= 0 {
		return c.usageError("--interval must be positive")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	tty := jobIsTerminal(c.stdout)
	prev := ""
	job, err := cl.Watch(ctx, pos[0], *interval, func(j *client.Job) {
		line := jobProgressLine(j)
		if line == prev {
			return
		}
		if tty {
			// Redraw in place; pad with spaces over the rest of a longer previous line.
			fmt.Fprintf(c.stdout, "\r%s%s", line, strings.Repeat(" ", max(0, len(prev)-len(line))))
		} else {
			fmt.Fprintln(c.stdout, line)
		}
		prev = line
	})
	if tty && prev != "" {
		fmt.Fprintln(c.stdout)
	}
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "job %s %s: %s\n", job.JobID, job.Status, jobCounts(job.Progress))
	if job.Status != client.JobCompleted {
		return 1
	}
	return 0
}

// jobBarOrder is the order of task states along the progress bar, and the mark of each.
var jobBarOrder = []struct {
	status string
	mark   byte
}{
	{client.TaskCompleted, '='},
	{client.TaskFailed, 'x'},
	{client.TaskCanceled, '-'},
	{client.TaskSkipped, '-'},
	{client.TaskProcessing, '>'},
	{client.TaskPending, '.'},
	{client.TaskWaiting, ' '},
}

const jobBarWidth = 30

// jobProgressLine draws a job's task states as a bar and counts, e.g.
// "[============>>>>>>.....      ] 2/5 done: completed 2, processing 1, pending 1, waiting 1".
func jobProgressLine(j *client.Job) string {
	total := 0
	for _, n := range j.Progress {
		total += n
	}
	bar := []byte(strings.Repeat(" ", jobBarWidth))
	if total > 0 {
		// Each state's cells end where its cumulative share does, so rounding never overflows.
		cum, start := 0, 0
		for _, s := range jobBarOrder {
			cum += j.Progress[s.status]
			end := jobBarWidth * cum / total
			for i := start; i < end; i++ {
				bar[i] = s.mark
			}
			start = end
		}
	}
	done := total - j.Progress[client.TaskWaiting] - j.Progress[client.TaskPending] - j.Progress[client.TaskProcessing]
	return fmt.Sprintf("[%s] %d/%d done: %s", bar, done, total, jobCounts(j.Progress))
}

// jobCounts lists the non-zero task counts in the order of a task's life.
func jobCounts(progress map[string]int) string {
	var parts []string
	for _, s := range client.TaskStatuses {
		if n := progress[s]; n > 0 {
			parts = append(parts, s+" "+strconv.Itoa(n))
		}
	}
	if len(parts) == 0 {
		return "no tasks"
	}
	return strings.Join(parts, ", ")
}

// jobTime shows a Unix-millisecond time in local time.
func jobTime(ms int64) string {
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05")
}

// jobIsTerminal reports whether w is a terminal, where a progress line can be redrawn in place.
func jobIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
