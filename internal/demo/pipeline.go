package demo

// `baton dev --demo pipeline`: the dev server, examples/pipeline/pipeline.yaml deployed through the
// producer API, and one `baton worker` process per operator of it, each running the hidden
// `baton demo-task` as its child program. The always_on source emits block-range partitions on
// its output; routing starts the reactive jobs' tasks, whose children emit events of their own
// through the task-scoped endpoint with nothing but their capability token.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/wrapper"
	"github.com/baton-dev/baton/worker"
)

// PipelineYAML is examples/pipeline/pipeline.yaml (a test keeps the two equal), built in so that
// the demo runs from any directory.
const PipelineYAML = `# A block-indexing DAG in the DAG document format Baton deploys unchanged.
#
#   block_follower (always_on source) --output 0 = "blocks"--> range_stats (PerUpdate)
#        |                                                       |
#        |                                            output 0 = "block_stats"
#        |                                                       v
#        |                                               range_totals (PerPartition)
#        +--"blocks"--> mainnet_alerts   (where chain = mainnet)
#        +--"blocks"--> testnet_alerts   (where chain in [sepolia, holesky])
#
#   range_stats --output 1--> "alert_events", a buffered dataset: each task writes alert rows,
#   a trusted sink loads them into the dataset's table, and each loaded batch routes
#        "alert_events"--> pager    (where severity = high)
#        "alert_events"--> digest   (where severity in [low, medium])
#
# Run it with ` + "`baton dev --demo pipeline`" + `, or deploy it yourself with
# ` + "`baton pipeline deploy -f examples/pipeline/pipeline.yaml`" + ` and run workers for its operators.
name: blocks_demo
defaults:
  max_attempts: 3
  heartbeat_timeout_seconds: 30
  priority: normal
jobs:
  - name: block_follower
    activation: source
    runtime: ecs_platform
    operator: block_follower
    outputs: 1
    source: {kind: always_on}
    config: {chain: mainnet, first_block: 1000000, range_size: 10000, ranges: 10, interval_ms: 300}

  - name: range_stats
    activation: reactive
    runtime: ecs_platform
    operator: range_stats
    execution_strategy: PerUpdate
    outputs: 2
    inputs:
      - from: {job: block_follower, output: 0}

  - name: range_totals
    activation: reactive
    runtime: ecs_platform
    operator: range_totals
    execution_strategy: PerPartition
    outputs: 0
    scaling: {max_concurrency: 2}
    inputs:
      - from: {dataset: block_stats}

  - name: mainnet_alerts
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    queue: alerts_mainnet
    outputs: 0
    config: {severity: high}
    inputs:
      - from: {dataset: blocks}
        where: {chain: mainnet}

  - name: testnet_alerts
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    queue: alerts_testnet
    outputs: 0
    config: {severity: low}
    inputs:
      - from: {dataset: blocks}
        where: {chain: [sepolia, holesky]}

  - name: pager
    activation: reactive
    runtime: ecs_platform
    operator: alert_reader
    queue: alerts_pager
    outputs: 0
    inputs:
      - from: {dataset: alert_events}
        where: {severity: high}

  - name: digest
    activation: reactive
    runtime: ecs_platform
    operator: alert_reader
    queue: alerts_digest
    outputs: 0
    inputs:
      - from: {dataset: alert_events}
        where: {severity: [low, medium]}

publish:
  blocks:
    from: {job: block_follower, output: 0}
    storage: postgres
    filter_fields: [chain]
  block_stats:
    from: {job: range_stats, output: 0}
    storage: postgres
    schema:
      columns:
        - {name: chain, type: string, required: true}
        - {name: start_block, type: integer, required: true}
        - {name: end_block, type: integer, required: true}
        - {name: tx_count, type: integer}
      unique: [chain, start_block]
    filter_fields: [chain]
  alert_events:
    from: {job: range_stats, output: 1}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: chain, type: string, required: true}
        - {name: block, type: integer, required: true}
        - {name: severity, type: string, required: true}
        - {name: message, type: string}
        - {name: seen_at, type: timestamp}
      unique: [dedupe_key]
    filter_fields: [severity, chain]
`

// pipelineWorkers are the workers of the pipeline demo: one per operator.
var pipelineWorkers = []workerSpec{
	{"block_follower", nil},
	{"range_stats", nil},
	{"range_totals", nil},
	{"alerts", []string{"alerts_mainnet", "alerts_testnet"}},
	{"alert_reader", []string{"alerts_pager", "alerts_digest"}},
}

// pipelineRoutes is how many tasks each reactive job of the demo gets: one per block range,
// and for the readers of alert_events one per loaded batch whose rows match their where (every
// batch has a low alert; every other one a high one, the rest a medium one).
var pipelineRoutes = map[string]int{"range_stats": 10, "range_totals": 10, "mainnet_alerts": 10, "testnet_alerts": 10,
	"pager": 5, "digest": 10}

// runPipeline deploys the example pipeline, starts its workers, and prints the jobs' task counts
// as they change until every block range went through every job; the workers keep running.
func (d *session) runPipeline(ctx context.Context) error {
	c := client.New(d.producerURL, d.apiKey)
	p, err := c.DeployPipeline(ctx, []byte(PipelineYAML), "application/yaml")
	if err != nil {
		return fmt.Errorf("deploy examples/pipeline/pipeline.yaml: %w", err)
	}
	fmt.Fprintf(d.stdout, "demo: deployed pipeline %s version %s (%d jobs)\n", p.Name, p.Version, len(p.Jobs))
	stop, err := d.startWorkers(ctx, pipelineWorkers)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(d.stdout, "demo: started %d `baton worker` processes (one per operator)\n", len(pipelineWorkers))
	start := time.Now()
	last := ""
	for ctx.Err() == nil {
		p, err := c.GetPipeline(ctx, "blocks_demo")
		if err != nil {
			return err
		}
		var parts []string
		done := true
		for _, j := range p.Jobs {
			parts = append(parts, fmt.Sprintf("%s %d/%d", j.Name, j.Counts["completed"], j.Counts["routed"]))
			if j.Activation == "reactive" && (j.Counts["completed"] < pipelineRoutes[j.Name] || j.Counts["completed"] != j.Counts["routed"]) {
				done = false
			}
		}
		if line := strings.Join(parts, ", "); line != last {
			last = line
			fmt.Fprintf(d.stdout, "demo: %5.1fs  completed/routed: %s\n", time.Since(start).Seconds(), line)
		}
		if done {
			fmt.Fprintf(d.stdout, "demo: all 10 block ranges went through every job in %.1fs; see `baton pipeline get blocks_demo`, "+
				"`baton dataset get blocks` and the alert rows the sink loaded: `baton dataset rows alert_events`\n", time.Since(start).Seconds())
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	<-ctx.Done()
	return nil
}

// runPipelineTask is `baton demo-task` for a task of the example pipeline.
func runPipelineTask(ctx context.Context, p wrapper.Payload, stdout, stderr io.Writer) int {
	var cfg struct {
		Chain      string `json:"chain"`
		FirstBlock int64  `json:"first_block"`
		RangeSize  int64  `json:"range_size"`
		Ranges     int64  `json:"ranges"`
		IntervalMs int64  `json:"interval_ms"`
		Severity   string `json:"severity"`
	}
	_ = json.Unmarshal(p.Config, &cfg)
	out := map[string]any{"job": p.Job.Name, "operator": p.Operator, "attempt": p.Attempt}
	var in *worker.DatasetInput
	if len(p.Inputs) > 0 {
		in = &p.Inputs[0]
		out["input"] = map[string]any{"dataset": in.DatasetName, "partition_key": in.PartitionKey, "where": in.Where}
	}
	switch p.Operator {
	case "block_follower":
		// A source that follows a chain: one partition per interval on output 0, then it
		// keeps following (its wrapper heartbeats) until it is stopped.
		for i := range cfg.Ranges {
			start := cfg.FirstBlock + i*cfg.RangeSize
			ev := map[string]any{"dataset_uuid": p.Outputs[0].DatasetUUID, "dataset_version": p.Outputs[0].DatasetVersion,
				"partition_key": fmt.Sprintf("%d-%d", start, start+cfg.RangeSize-1), "start": start, "end": start + cfg.RangeSize - 1}
			if status := taskCall(ctx, p, "/v1/task/events", map[string]any{"events": []any{ev}}); status != http.StatusOK {
				fmt.Fprintf(stderr, "block_follower: events answered %v\n", status)
				return 1
			}
			select {
			case <-ctx.Done():
				return 1
			case <-time.After(time.Duration(cfg.IntervalMs) * time.Millisecond):
			}
		}
		<-ctx.Done()
		return 1
	case "range_stats":
		// Reads its partition of blocks, writes the same partition of block_stats.
		time.Sleep(100*time.Millisecond + rand.N(200*time.Millisecond))
		ev := map[string]any{"dataset_uuid": p.Outputs[0].DatasetUUID, "dataset_version": p.Outputs[0].DatasetVersion,
			"partition_key": in.PartitionKey, "start": in.Start, "end": in.End}
		if status := taskCall(ctx, p, "/v1/task/events", map[string]any{"events": []any{ev}}); status != http.StatusOK {
			fmt.Fprintf(stderr, "range_stats: events answered %v\n", status)
			return 1
		}
		out["tx_count"] = rand.N(5000)
		// Alert rows for the buffered dataset alert_events: the wrapper publishes the file once
		// this program succeeded, and the sink loads it. Keys are stable, so a retry adds nothing.
		severity := "medium"
		if (*in.Start/(*in.End-*in.Start+1))%2 == 0 { // every other range
			severity = "high"
		}
		var rows bytes.Buffer
		for i, sev := range []string{severity, "low"} {
			b, _ := json.Marshal(map[string]any{"dedupe_key": fmt.Sprintf("mainnet:%d:%d", *in.Start, i), "chain": "mainnet",
				"block": *in.Start + int64(i), "severity": sev, "message": fmt.Sprintf("%s alert in blocks %s", sev, in.PartitionKey),
				"seen_at": time.Now().UTC().Format(time.RFC3339Nano), "org_id": "ignored: rows belong to the publisher's tenant"})
			rows.Write(append(b, '\n'))
		}
		if p.Storage != nil {
			// S3 object storage: write the batch under the task's own prefix with the credentials
			// the wrapper minted (the AWS_* variables, which let it write nowhere else) and
			// publish it with the task's capability token.
			uri, err := putBatch(ctx, p, "alert_events", rows.Bytes())
			if err != nil {
				fmt.Fprintln(stderr, "range_stats: write the alert batch:", err)
				return 1
			}
			body := map[string]any{"batch_uri": uri, "record_count": 2, "content_type": "application/jsonl"}
			if status := taskCall(ctx, p, "/v1/task/buffer-publish", body); status != http.StatusOK {
				fmt.Fprintf(stderr, "range_stats: buffer-publish answered %v\n", status)
				return 1
			}
			// What the untrusted child holds: no secret but its own token and credentials.
			var names []string
			for _, kv := range os.Environ() {
				name, _, _ := strings.Cut(kv, "=")
				names = append(names, name)
			}
			slices.Sort(names)
			out["batch_uri"], out["environment"] = uri, names
		} else if err := os.WriteFile(filepath.Join(os.Getenv(runner.EnvBuffers), "alert_events.jsonl"), rows.Bytes(), 0o600); err != nil {
			// Object storage in a directory: the wrapper publishes the file once this succeeded.
			fmt.Fprintln(stderr, "range_stats: write the alert batch:", err)
			return 1
		}
		out["alerts"] = 2
	case "range_totals":
		time.Sleep(200*time.Millisecond + rand.N(300*time.Millisecond))
		out["totaled"] = in.PartitionKey
	case "alert_reader":
		// A buffered dataset's event names the batch (its cursor); the rows are read with the
		// input's where through the producer API, or as here, just reported.
		time.Sleep(20*time.Millisecond + rand.N(50*time.Millisecond))
		var cursor int64
		if in.Cursor != nil {
			cursor = *in.Cursor
		}
		out["result"] = fmt.Sprintf("alerts of batch %d of %s with where %s", cursor, in.DatasetName, in.Where)
	case "alerts":
		time.Sleep(50*time.Millisecond + rand.N(100*time.Millisecond))
		out["severity"] = cfg.Severity
		out["result"] = fmt.Sprintf("read partition %s of %s with where %s", in.PartitionKey, in.DatasetName, in.Where)
	default:
		out["result"] = "nothing to do for operator " + p.Operator
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintln(stderr, "baton demo-task:", err)
		return 1
	}
	return 0
}

// putBatch writes a JSONL batch of the output dataset named dataset to object storage under
// the task's own prefix, with the AWS SDK configured from the environment alone, as any program
// using the AWS CLI's variables would; it returns the batch's URI.
func putBatch(ctx context.Context, p wrapper.Payload, dataset string, jsonl []byte) (string, error) {
	var prefix string
	for _, o := range p.Outputs {
		if o.DatasetName == dataset {
			prefix = p.Storage.OutputPrefixes[o.DatasetUUID]
		}
	}
	bucket, key, ok := strings.Cut(strings.TrimPrefix(prefix, "s3://"), "/")
	if !ok || !strings.HasPrefix(prefix, "s3://") {
		return "", fmt.Errorf("no s3:// write prefix for dataset %s in %+v", dataset, p.Storage)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return "", err
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = os.Getenv("AWS_ENDPOINT_URL") != "" })
	key += "batch.jsonl"
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: bytes.NewReader(jsonl), ContentType: aws.String("application/jsonl")}); err != nil {
		return "", err
	}
	return "s3://" + bucket + "/" + key, nil
}

// taskCall posts the attempt's fence and body to a task-scoped endpoint with the task's
// capability token and returns the answer's status code (or the error's text).
func taskCall(ctx context.Context, p wrapper.Payload, path string, body map[string]any) any {
	if body == nil {
		body = map[string]any{}
	}
	body["task_id"], body["attempt"], body["lease_token"] = p.TaskID, p.Attempt, p.LeaseToken
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(os.Getenv(wrapper.EnvPublicURL), "/")+path, bytes.NewReader(raw))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Trace-Task-Capability", os.Getenv(wrapper.EnvCapability))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
