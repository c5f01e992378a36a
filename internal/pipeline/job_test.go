package pipeline

import (
	"slices"
	"strings"
	"testing"
)

const namePat = `^[a-z][a-z0-9_]{0,127}$`

func TestDocumentRules(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{"a valid minimal document has no problems", doc(jobs(srcJob)), nil},
		{"an unknown top-level key", doc(jobs(srcJob), "version: 2"), []string{`unknown key "version"`}},
		{"name is required", "jobs:\n  - " + srcJob + "\n", []string{`name: required`}},
		{"name must match the pattern", "name: Eth-Main\njobs:\n  - " + srcJob + "\n",
			[]string{`name: "Eth-Main" does not match ` + namePat}},
		{"name must be a string", "name: [a]\njobs:\n  - " + srcJob + "\n", []string{`name: must be a string`}},
		{"jobs is required", "name: d\n", []string{`jobs: required`}},
		{"jobs must not be empty", "name: d\njobs: []\n", []string{`jobs: must list at least one job`}},
		{"jobs must be a list", "name: d\njobs: {a: 1}\n", []string{`jobs: must be a list`}},
		{"the document must be a map", "- a\n- b\n",
			[]string{`document must be a map with name, jobs, and optionally defaults and publish`}},
	})
}

func TestDefaultsRules(t *testing.T) {
	t.Parallel()
	withDefaults := func(d string) string { return doc(jobs(srcJob), "defaults: "+d) }
	runRules(t, []ruleCase{
		{"an unknown key", withDefaults(`{retries: 3}`), []string{`defaults: unknown key "retries"`}},
		{"defaults must be a map", withDefaults(`[1]`), []string{`defaults: must be a map`}},
		{"priority name", withDefaults(`{priority: urgent}`),
			[]string{`defaults.priority: must be low, normal, high or an integer from -1000 to 1000`}},
		{"priority range", withDefaults(`{priority: 1001}`),
			[]string{`defaults.priority: must be low, normal, high or an integer from -1000 to 1000`}},
		{"max_attempts range", withDefaults(`{max_attempts: 0}`), []string{`defaults.max_attempts: must be between 1 and 100`}},
		{"heartbeat must be positive", withDefaults(`{heartbeat_timeout_seconds: 0}`),
			[]string{`defaults.heartbeat_timeout_seconds: must be greater than 0`}},
		{"max_queue_depth must be an integer", withDefaults(`{max_queue_depth: many}`),
			[]string{`defaults.max_queue_depth: must be an integer`}},
		{"max_queue_age syntax", withDefaults(`{max_queue_age: 5 minutes}`),
			[]string{`defaults.max_queue_age: invalid duration "5 minutes": write it as "30s", "5m" or "1h"`}},
		{"max_queue_age must be a string", withDefaults(`{max_queue_age: 300}`),
			[]string{`defaults.max_queue_age: must be a duration such as "30s", "5m" or "1h"`}},
		{"max_queue_age must be positive", withDefaults(`{max_queue_age: -5m}`),
			[]string{`defaults.max_queue_age: must be greater than 0`}},
		{"backpressure_mode is pause or coalesce", withDefaults(`{backpressure_mode: drop}`),
			[]string{`defaults.backpressure_mode: must be pause or coalesce, not "drop"`}},
	})
}

func TestJobRules(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{"an unknown key", doc(jobs(srcJob, reader(`, retries: 3`))), []string{`jobs[1]: unknown key "retries"`}},
		{"a job must be a map", doc(jobs(srcJob, `just_a_name`)), []string{`jobs[1]: must be a map`}},
		{"name is required", doc(jobs(`{activation: source, runtime: lambda, operator: op, outputs: 0, source: {kind: manual}}`)),
			[]string{`jobs[0].name: required`}},
		{"name must match the pattern", doc(jobs(source("Src", `, source: {kind: manual}`))),
			[]string{`jobs[0].name: "Src" does not match ` + namePat}},
		{"names are unique", doc(jobs(srcJob, source("src", `, source: {kind: manual}`))),
			[]string{`jobs[1].name: duplicate job name "src"`}},
		{"activation is required", doc(jobs(`{name: a, runtime: lambda, operator: op, outputs: 0}`)),
			[]string{`jobs[0].activation: required`}},
		{"activation values", doc(jobs(`{name: a, activation: push, runtime: lambda, operator: op, outputs: 0}`)),
			[]string{`jobs[0].activation: must be source or reactive, not "push"`}},
		{"runtime is required", doc(jobs(`{name: a, activation: source, operator: op, outputs: 0, source: {kind: manual}}`)),
			[]string{`jobs[0].runtime: required`}},
		{"runtime ecs_udf runs no secrets", doc(jobs(`{name: a, activation: source, runtime: ecs_udf, operator: op, outputs: 0, source: {kind: manual}, secrets: [api_key]}`)),
			[]string{`jobs[0].secrets: not allowed with runtime ecs_udf: it runs untrusted code, which never receives secrets`}},
		{"operator udf needs a udf", doc(jobs(`{name: a, activation: source, runtime: ecs_udf, operator: udf, outputs: 0, source: {kind: manual}}`)),
			[]string{`jobs[0].udf: required for operator udf: {bundle_id, entrypoint}`}},
		{"a dispatcher job runs no bundle", doc(jobs(`{name: a, activation: source, runtime: dispatcher, operator: op, outputs: 0, source: {kind: manual}, udf: {bundle_id: b1}}`)),
			[]string{`jobs[0].udf: not allowed on a dispatcher job: the server runs it and runs no user code; use ecs_udf or lambda`}},
		{"runtime values", doc(jobs(`{name: a, activation: source, runtime: k8s, operator: op, outputs: 0, source: {kind: manual}}`)),
			[]string{`jobs[0].runtime: must be lambda, ecs_platform, dispatcher or ecs_udf, not "k8s"`}},
		{"operator is required", doc(jobs(`{name: a, activation: source, runtime: lambda, outputs: 0, source: {kind: manual}}`)),
			[]string{`jobs[0].operator: required`}},
		{"operator must match the pattern", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: 9op, outputs: 0, source: {kind: manual}}`)),
			[]string{`jobs[0].operator: "9op" does not match ^[A-Za-z][A-Za-z0-9_.:-]{0,127}$`}},
		{"queue must match the operator pattern", doc(jobs(source("a", `, source: {kind: manual}, queue: "my queue"`))),
			[]string{`jobs[0].queue: "my queue" does not match ^[A-Za-z][A-Za-z0-9_.:-]{0,127}$`}},
		{"outputs is required", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, source: {kind: manual}}`)),
			[]string{`jobs[0].outputs: required`}},
		{"outputs must be an integer, not 1.5", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, outputs: 1.5, source: {kind: manual}}`)),
			[]string{`jobs[0].outputs: must be an integer`}},
		{"outputs must be an integer, not a string", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, outputs: two, source: {kind: manual}}`)),
			[]string{`jobs[0].outputs: must be an integer`}},
		{"outputs must not be negative", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, outputs: -1, source: {kind: manual}}`)),
			[]string{`jobs[0].outputs: must be between 0 and 64`}},
		{"at most MaxOutputs outputs", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, outputs: 64, source: {kind: manual}}`)), nil},
		{"not more", doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, outputs: 1000, source: {kind: manual}}`)),
			[]string{`jobs[0].outputs: must be between 0 and 64`}},
		{"a reactive job needs inputs", doc(jobs(srcJob, `{name: r, activation: reactive, runtime: lambda, operator: op, outputs: 0}`)),
			[]string{`jobs[1].inputs: required for a reactive job`}},
		{"a reactive job needs at least one input", doc(jobs(srcJob, readerOf("r", `[]`, ""))),
			[]string{`jobs[1].inputs: a reactive job needs at least one input`}},
		{"a source job has no inputs", doc(jobs(srcJob, source("s2", `, source: {kind: manual}, inputs: [{from: {job: src, output: 0}}]`))),
			[]string{`jobs[1].inputs: not allowed for a source job`}},
		{"execution_strategy is for reactive jobs", doc(jobs(source("a", `, source: {kind: manual}, execution_strategy: PerUpdate`))),
			[]string{`jobs[0].execution_strategy: only allowed for reactive jobs`}},
		{"execution_strategy values", doc(jobs(srcJob, reader(`, execution_strategy: PerBatch`))),
			[]string{`jobs[1].execution_strategy: must be PerUpdate or PerPartition, not "PerBatch"`}},
		{"update_strategy values", doc(jobs(srcJob, reader(`, update_strategy: upsert`))),
			[]string{`jobs[1].update_strategy: must be append or replace, not "upsert"`}},
		{"append needs a unique_key", doc(jobs(srcJob, reader(`, update_strategy: append`))),
			[]string{`jobs[1].unique_key: required when update_strategy is append`}},
		{"unique_key must not be empty", doc(jobs(srcJob, reader(`, update_strategy: append, unique_key: []`))),
			[]string{`jobs[1].unique_key: must list at least one column`}},
		{"unique_key names are columns", doc(jobs(srcJob, reader(`, unique_key: [Block]`))),
			[]string{`jobs[1].unique_key[0]: "Block" does not match ^[a-z_][a-z0-9_]{0,62}$`}},
		{"bootstrap.reset_outputs is a boolean", doc(jobs(source("a", `, source: {kind: manual}, bootstrap: {reset_outputs: yes}`))),
			[]string{`jobs[0].bootstrap.reset_outputs: must be true or false`}},
		{"backpressure_mode values", doc(jobs(srcJob, reader(`, max_queue_depth: 10, backpressure_mode: drop_oldest`))),
			[]string{`jobs[1].backpressure_mode: must be pause or coalesce, not "drop_oldest"`}},
		{"max_queue_depth must be positive", doc(jobs(srcJob, reader(`, max_queue_depth: 0`))),
			[]string{`jobs[1].max_queue_depth: must be greater than 0`}},
		{"backpressure is for reactive jobs", doc(jobs(source("src", `, source: {kind: manual}, max_queue_depth: 10`), reader(``))),
			[]string{`jobs[0].max_queue_depth: only allowed for reactive jobs: backpressure holds the events routed to a job, and a source job is started by its source`}},
		{"bootstrap is for source jobs", doc(jobs(srcJob, reader(`, bootstrap: {reset_outputs: true}`))),
			[]string{`jobs[1].bootstrap: only allowed for source jobs: a reactive job's outputs are reset by resetting the source it reads`}},
		{"bootstrap is refused on a reactive job even when false", doc(jobs(srcJob, reader(`, bootstrap: {reset_outputs: false}`))),
			[]string{`jobs[1].bootstrap: only allowed for source jobs: a reactive job's outputs are reset by resetting the source it reads`}},
		{"bootstrap must be a map", doc(jobs(source("a", `, source: {kind: manual}, bootstrap: true`))),
			[]string{`jobs[0].bootstrap: must be a map`}},
		{"bootstrap.reset_outputs must not be a string", doc(jobs(source("a", `, source: {kind: manual}, bootstrap: {reset_outputs: "true"}`))),
			[]string{`jobs[0].bootstrap.reset_outputs: must be true or false`}},
		{"bootstrap unknown key", doc(jobs(source("a", `, source: {kind: manual}, bootstrap: {reset: true}`))),
			[]string{`jobs[0].bootstrap: unknown key "reset"`}},
		{"secrets are refused on a UDF job", doc(jobs(srcJob, reader(`, udf: {bundle_id: b1, entrypoint: main}, secrets: [api_key]`))),
			[]string{`jobs[1].secrets: not allowed on a UDF job: user code never receives secrets`}},
		{"secret names match the pattern", doc(jobs(source("a", `, source: {kind: manual}, secrets: ["1password"]`))),
			[]string{`jobs[0].secrets[0]: "1password" does not match ^[a-z][a-z0-9_]{0,127}$`}},
		{"secret names are lowercase", doc(jobs(source("a", `, source: {kind: manual}, secrets: [db/url]`))),
			[]string{`jobs[0].secrets[0]: "db/url" does not match ^[a-z][a-z0-9_]{0,127}$`}},
		{"secrets are unique", doc(jobs(source("a", `, source: {kind: manual}, secrets: [db_url, api_key, db_url]`))),
			[]string{`jobs[0].secrets[2]: duplicate secret "db_url"`}},
		{"scaling.max_concurrency must be positive", doc(jobs(source("a", `, source: {kind: manual}, scaling: {max_concurrency: 0}`))),
			[]string{`jobs[0].scaling.max_concurrency: must be greater than 0`}},
		{"scaling.max_concurrency is required", doc(jobs(source("a", `, source: {kind: manual}, scaling: {}`))),
			[]string{`jobs[0].scaling.max_concurrency: required`}},
		{"timeout_seconds must be positive", doc(jobs(source("a", `, source: {kind: manual}, timeout_seconds: -5`))),
			[]string{`jobs[0].timeout_seconds: must be greater than 0`}},
		{"job max_attempts range", doc(jobs(source("a", `, source: {kind: manual}, max_attempts: 101`))),
			[]string{`jobs[0].max_attempts: must be between 1 and 100`}},
		{"job priority", doc(jobs(source("a", `, source: {kind: manual}, priority: urgent`))),
			[]string{`jobs[0].priority: must be low, normal, high or an integer from -1000 to 1000`}},
		{"idle_timeout is not negative", doc(jobs(source("a", `, source: {kind: manual}, idle_timeout: -5m`))),
			[]string{`jobs[0].idle_timeout: invalid idle_timeout "-5m": write 0, never, or a duration such as "30s", "5m" or "1h"`}},
		{"idle_timeout is a duration", doc(jobs(source("a", `, source: {kind: manual}, idle_timeout: soon`))),
			[]string{`jobs[0].idle_timeout: invalid idle_timeout "soon": write 0, never, or a duration such as "30s", "5m" or "1h"`}},
		{"idle_timeout is not a number but 0", doc(jobs(source("a", `, source: {kind: manual}, idle_timeout: 300`))),
			[]string{`jobs[0].idle_timeout: must be 0, never, or a duration such as "30s", "5m" or "1h"`}},
		{"idle_timeout is not a boolean", doc(jobs(source("a", `, source: {kind: manual}, idle_timeout: true`))),
			[]string{`jobs[0].idle_timeout: must be 0, never, or a duration such as "30s", "5m" or "1h"`}},
		{"idle_timeout is refused on a dispatcher job", doc(jobs(`{name: a, activation: source, runtime: dispatcher, operator: op, outputs: 1, source: {kind: manual}, idle_timeout: 5m}`)),
			[]string{`jobs[0].idle_timeout: not allowed on a dispatcher job: the server runs it, there are no workers to idle`}},
		{"config must be a map", doc(jobs(source("a", `, source: {kind: manual}, config: [1, 2]`))),
			[]string{`jobs[0].config: must be a map`}},
		{"udf.entrypoint may not be empty", doc(jobs(srcJob, reader(`, udf: {bundle_id: b1, entrypoint: ""}`))),
			[]string{`jobs[1].udf.entrypoint: must not be empty`}},
		{"udf.bundle_id must not be empty", doc(jobs(srcJob, reader(`, udf: {bundle_id: "", entrypoint: main}`))),
			[]string{`jobs[1].udf.bundle_id: must not be empty`}},
	})
}

func TestSourceRules(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{"a source job needs a source", doc(jobs(source("a", ""))), []string{`jobs[0].source: required for a source job`}},
		{"a reactive job has no source", doc(jobs(srcJob, reader(`, source: {kind: manual}`))),
			[]string{`jobs[1].source: not allowed for a reactive job`}},
		{"kind is required", doc(jobs(source("a", `, source: {schedule: rate(5 minutes)}`))),
			[]string{`jobs[0].source.kind: required`}},
		{"kind values", doc(jobs(source("a", `, source: {kind: hourly}`))),
			[]string{`jobs[0].source.kind: must be cron, always_on, manual or webhook, not "hourly"`}},
		{"an unknown key", doc(jobs(source("a", `, source: {kind: always_on, every: 5m}`))),
			[]string{`jobs[0].source: unknown key "every"`}},
		{"cron needs a schedule", doc(jobs(source("a", `, source: {kind: cron}`))),
			[]string{`jobs[0].source.schedule: required`}},
		{"a bad schedule", doc(jobs(source("a", `, source: {kind: cron, schedule: "rate(5 fortnights)"}`))),
			[]string{`jobs[0].source.schedule: bad schedule "rate(5 fortnights)": unknown unit "fortnights": must be minute(s), hour(s) or day(s)`}},
		{"schedule only with cron", doc(jobs(source("a", `, source: {kind: manual, schedule: "rate(5 minutes)"}`))),
			[]string{`jobs[0].source.schedule: only allowed when kind is cron`}},
		{"webhook needs a path", doc(jobs(source("a", `, source: {kind: webhook}`))),
			[]string{`jobs[0].source.webhook_path: required`}},
		{"webhook_path only with webhook", doc(jobs(source("a", `, source: {kind: always_on, webhook_path: /x}`))),
			[]string{`jobs[0].source.webhook_path: only allowed when kind is webhook`}},
		{"webhook path starts with a slash", doc(jobs(source("a", `, source: {kind: webhook, webhook_path: hooks/a}`))),
			[]string{`jobs[0].source.webhook_path: must start with "/"`}},
		{"webhook path has no dot-dot", doc(jobs(source("a", `, source: {kind: webhook, webhook_path: /hooks/../admin}`))),
			[]string{`jobs[0].source.webhook_path: must not contain ".."`}},
		{"webhook path characters", doc(jobs(source("a", `, source: {kind: webhook, webhook_path: "/hooks/a b"}`))),
			[]string{`jobs[0].source.webhook_path: "/hooks/a b" does not match ^/[A-Za-z0-9_./-]{1,255}$`}},
		{"webhook paths are unique", doc(jobs(
			source("a", `, source: {kind: webhook, webhook_path: /hooks/push}`),
			source("b", `, source: {kind: webhook, webhook_path: /hooks/push}`))),
			[]string{`jobs[1].source.webhook_path: duplicate webhook path "/hooks/push"`}},
	})
}

// A job's execution deadline is its own timeout_seconds, else the document's default, else its
// runtime's: 60 s on lambda, 1800 s on ecs_platform, none for the server's dispatcher jobs.
func TestTimeoutSecondsDefaultsByRuntime(t *testing.T) {
	doc := func(defaults, job string) string {
		return "name: p\n" + defaults + "jobs:\n  - {name: j, activation: source, source: {kind: manual}, outputs: 0, operator: op, " + job + "}\n"
	}
	for _, c := range []struct {
		name, defaults, job string
		want                int
	}{
		{"lambda", "", "runtime: lambda", 60},
		{"ecs_platform", "", "runtime: ecs_platform", 1800},
		{"dispatcher", "", "runtime: dispatcher", 0},
		{"the job's own", "", "runtime: lambda, timeout_seconds: 5", 5},
		{"the document's default", "defaults: {timeout_seconds: 300}\n", "runtime: lambda", 300},
		{"the job's over the default", "defaults: {timeout_seconds: 300}\n", "runtime: ecs_platform, timeout_seconds: 7", 7},
	} {
		d, err := Parse([]byte(doc(c.defaults, c.job)), "application/yaml")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := d.Jobs[0].TimeoutSeconds; got != c.want {
			t.Errorf("%s: timeout_seconds %d, want %d", c.name, got, c.want)
		}
	}
	if _, err := Parse([]byte(doc("defaults: {timeout_seconds: 0}\n", "runtime: lambda")), "application/yaml"); err == nil ||
		!strings.Contains(err.Error(), "defaults.timeout_seconds") {
		t.Errorf("defaults.timeout_seconds: 0 was not refused by path: %v", err)
	}
}

// An append job's unique_key is checked against the datasets its outputs are published as: it
// names columns of their schemas, and it is the unique key of a buffered one, on which the sink
// skips duplicates.
func TestUniqueKeyMatchesThePublishedSchemas(t *testing.T) {
	t.Parallel()
	writer := func(key string) string {
		return `{name: w, activation: source, runtime: ecs_platform, operator: op, outputs: 2, source: {kind: manual}, update_strategy: append, unique_key: ` + key + `}`
	}
	buffered := `alerts: {from: {job: w, output: 0}, write_mode: buffered, schema: {columns: [{name: dedupe_key, type: string}, {name: channel, type: string}, {name: level, type: string}], unique: [dedupe_key, channel]}}`
	direct := `facts: {from: {job: w, output: 1}, schema: {columns: [{name: id, type: string}, {name: dedupe_key, type: string}, {name: channel, type: string}]}}`
	tests := []struct {
		name    string
		key     string
		publish string
		want    []string
	}{
		{"the buffered dataset's unique key, in its order", `[dedupe_key, channel]`, buffered, nil},
		{"the buffered dataset's unique key, in another order", `[channel, dedupe_key]`, buffered, nil},
		{"columns of a direct dataset's schema", `[dedupe_key, channel]`, "{" + buffered + ", " + direct + "}", nil},
		{"no schema to check against", `[anything]`, `{raw: {from: {job: w, output: 1}}}`, nil},
		{"not the buffered dataset's unique key", `[dedupe_key]`, buffered,
			[]string{`jobs[0].unique_key: [dedupe_key] is not the unique key [dedupe_key channel] of buffered dataset "alerts" (publish.alerts.schema.unique): its sink skips the rows whose unique key the dataset has`}},
		{"a column the schema lacks", `[dedupe_key, chanel]`, buffered,
			[]string{`jobs[0].unique_key[1]: column "chanel" is not in the schema of dataset "alerts" (publish.alerts.schema)`}},
		{"a column a direct dataset's schema lacks", `[dedupe_key, level]`, "{" + direct + "}",
			[]string{`jobs[0].unique_key[1]: column "level" is not in the schema of dataset "facts" (publish.facts.schema)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			publish := tt.publish
			if !strings.HasPrefix(publish, "{") {
				publish = "{" + publish + "}"
			}
			_, ps := Parse([]byte(doc(jobs(writer(tt.key)), "publish: "+publish)), "")
			if got := messages(ps); !slices.Equal(got, tt.want) {
				t.Errorf("problems\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// A replace job rewrites whole partitions of files it writes itself: an output published as a
// buffered dataset, whose rows its sink appends, is refused at its update_strategy, with the line.
func TestReplaceRefusesABufferedOutput(t *testing.T) {
	t.Parallel()
	writer := `{name: w, activation: source, runtime: ecs_platform, operator: op, outputs: 2, source: {kind: manual}, update_strategy: replace}`
	buffered := `alerts: {from: {job: w, output: 1}, write_mode: buffered, schema: {columns: [{name: k, type: string}], unique: [k]}}`
	direct := `facts: {from: {job: w, output: 0}, write_mode: direct}`
	tests := []struct {
		name, publish string
		want          []string
	}{
		{"direct and unpublished outputs", "{" + direct + "}", nil},
		{"a buffered output", "{" + direct + ", " + buffered + "}",
			[]string{`jobs[0].update_strategy: replace rewrites whole partitions of the job's outputs, but output 1 is buffered dataset "alerts" (publish.alerts.write_mode), whose rows its sink appends: use update_strategy append, or publish the output with write_mode direct`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ps := Parse([]byte(doc(jobs(writer), "publish: "+tt.publish)), "")
			if got := messages(ps); !slices.Equal(got, tt.want) {
				t.Errorf("problems\n%q\nwant\n%q", got, tt.want)
			}
			for _, p := range ps {
				if p.Line == 0 {
					t.Errorf("problem %q has no line", p.Message)
				}
			}
		})
	}
}
