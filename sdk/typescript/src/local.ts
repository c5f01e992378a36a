/**
 * `runLocal`: runs a handler in a test, without a server, with a fake task that records what the
 * handler did (heartbeats, events, published batches) and answers its reads from fixtures.
 * @module
 */
import type { StorageCredentials } from "./blob.js";
import { AbortError, isCategory } from "./errors.js";
import { toJsonl, type PipelineTask, type PublishedBatch, type Task, type TaskCallOptions, type TaskRowsOptions } from "./task.js";
import { failureOf, type Handler } from "./worker.js";
import type { DatasetRow, EventsAnswer, JsonValue, PipelineTaskInput, QueryResult, UpstreamEvent } from "./wire.js";

/** Options of {@link runLocal}. */
export interface RunLocalOptions {
  /** Each parent's output by taskId. */
  parents?: Record<string, JsonValue>;
  /** The task's name (default `local`). */
  name?: string;
  /** The task's key (default: the name). */
  key?: string;
  /** The attempt (default 1). */
  attempt?: number;
  /** The execution timeout: the task's signal aborts (kind `timeout`) when it passes. */
  timeoutMs?: number;
  /** A pipeline task's data plane. */
  pipeline?: PipelineTask;
  /** Secret values by name. */
  secrets?: Record<string, string>;
  /** Rows by dataset name or uuid, for `task.rows()`. */
  rows?: Record<string, DatasetRow[] | Record<string, unknown>[]>;
  /** Answers `task.query()`. */
  query?: (sql: string) => QueryResult | Promise<QueryResult>;
  /** Requests cancellation after this many milliseconds (as a heartbeat answer would). */
  cancelAfterMs?: number;
  /** Loses the lease after this many milliseconds (as a refused heartbeat would). */
  loseLeaseAfterMs?: number;
  /** The capability token the task shows (default `local-token`). */
  capabilityToken?: string;
}

/** What {@link runLocal} observed. */
export interface LocalResult {
  /** How the attempt would have been reported (`lost`: not at all). */
  status: "completed" | "failed" | "canceled" | "lost";
  /** The output (completed). */
  output?: JsonValue;
  /** The failure (failed): category, message, stack, retryable. */
  error?: { category: string; message: string; stack?: string; retryable?: boolean };
  /** What the handler threw, as it was. */
  thrown?: unknown;
  /** Times the handler asked for a heartbeat. */
  heartbeats: number;
  /** Events it reported. */
  events: UpstreamEvent[];
  /** Batches it published, by dataset, with their rows. */
  published: { dataset: string; rows: unknown[] }[];
  /** SQL statements it ran. */
  queries: string[];
}

/**
 * Runs `handler` once with `input` as a {@link Worker} would, and returns what the worker would
 * report together with what the handler did.
 *
 * ```ts
 * const r = await runLocal(handler, { n: 1 }, { parents: { a: { sum: 1 } } });
 * assert.deepEqual(r.output, { sum: 2 });
 * ```
 */
export async function runLocal(handler: Handler, input: JsonValue = {}, opts: RunLocalOptions = {}): Promise<LocalResult> {
  if (typeof handler !== "function") throw new TypeError("baton: runLocal needs a handler function");
  const result: LocalResult = { status: "completed", heartbeats: 0, events: [], published: [], queries: [] };
  const controller = new AbortController();
  let cancelRequested = false;
  let lost = false;
  const timers: NodeJS.Timeout[] = [];
  if (opts.timeoutMs !== undefined) timers.push(setTimeout(() => controller.abort(new AbortError("timeout", `the task's timeout of ${opts.timeoutMs} ms passed`)), opts.timeoutMs));
  if (opts.cancelAfterMs !== undefined)
    timers.push(
      setTimeout(() => {
        cancelRequested = true;
        controller.abort(new AbortError("cancel", "cancellation requested: user_requested"));
      }, opts.cancelAfterMs),
    );
  if (opts.loseLeaseAfterMs !== undefined)
    timers.push(
      setTimeout(() => {
        lost = true;
        controller.abort(new AbortError("lease_lost", "the lease was lost"));
      }, opts.loseLeaseAfterMs),
    );
  const name = opts.name ?? "local";
  const pipeline = opts.pipeline;
  const secrets = opts.secrets ?? {};
  let batches = 0;
  const task: Task = {
    id: "00000000-0000-0000-0000-000000000000",
    jobId: "job-local",
    key: opts.key ?? name,
    name,
    attempt: opts.attempt ?? 1,
    input,
    parents: opts.parents ?? {},
    timeoutMs: opts.timeoutMs,
    traceparent: undefined,
    pipeline,
    capabilityToken: opts.capabilityToken ?? "local-token",
    signal: controller.signal,
    shouldCancel: () => cancelRequested || lost,
    async heartbeat() {
      result.heartbeats++;
    },
    async publishBatch(dataset: string, rows: readonly unknown[]): Promise<PublishedBatch> {
      if (pipeline) {
        const ok = pipeline.outputs.some((o) => o.write_mode === "buffered" && (o.dataset_name === dataset || o.dataset_uuid === dataset));
        if (!ok) throw new Error(`baton: publishBatch: dataset ${JSON.stringify(dataset)} is not a buffered output of this task's job`);
      }
      toJsonl(rows);
      result.published.push({ dataset, rows: [...rows] });
      batches++;
      return { uri: `local://buffers/${dataset}/batch-${String(batches).padStart(4, "0")}.jsonl`, rows: rows.length, duplicate: false };
    },
    rows(dataset: string | PipelineTaskInput, ro: TaskRowsOptions = {}): AsyncGenerator<DatasetRow, void, undefined> {
      const key = typeof dataset === "string" ? dataset : dataset.dataset_name ?? dataset.dataset_uuid;
      const all = (opts.rows?.[key] ?? (typeof dataset === "string" ? undefined : opts.rows?.[dataset.dataset_uuid])) as DatasetRow[] | undefined;
      return (async function* () {
        if (!all) throw new Error(`baton: runLocal has no rows of dataset ${JSON.stringify(key)} (pass them as opts.rows)`);
        for (const r of all) {
          if (ro.where && !Object.entries(ro.where).every(([k, v]) => (Array.isArray(v) ? v.includes(r[k]) : r[k] === v))) continue;
          yield Object.assign({ _cursor: 1 }, r) as DatasetRow;
        }
      })();
    },
    async query(sql: string): Promise<QueryResult> {
      result.queries.push(sql);
      if (!opts.query) throw new Error("baton: runLocal has no query answers (pass opts.query)");
      return opts.query(sql);
    },
    async credentials(): Promise<StorageCredentials> {
      throw new Error("baton: runLocal has no object storage credentials");
    },
    async events(events: UpstreamEvent[], _o?: TaskCallOptions): Promise<EventsAnswer> {
      if (!Array.isArray(events) || events.length === 0) throw new TypeError("baton: events needs a non-empty array of events");
      result.events.push(...events);
      return { ok: true, received: events.length, stored: events.length };
    },
    async secrets() {
      return { ...secrets };
    },
    async secret(n: string) {
      if (!(n in secrets)) throw new Error(`baton: the task has no secret ${JSON.stringify(n)}`);
      return secrets[n];
    },
  };
  try {
    let out: unknown;
    let thrown: unknown;
    let threw = false;
    try {
      out = await handler(task);
    } catch (e) {
      threw = true;
      thrown = e;
    }
    if (lost) result.status = "lost";
    else if (cancelRequested) result.status = "canceled";
    else if (!threw) {
      result.output = JSON.parse(JSON.stringify(out === undefined ? null : out)) as JsonValue;
    } else {
      result.status = "failed";
      result.thrown = thrown;
      const f = failureOf(thrown);
      result.error = { category: isCategory(f.code) ? f.code : "USER_CODE", message: f.message, stack: f.stack, retryable: f.retryable };
    }
    return result;
  } finally {
    for (const t of timers) clearTimeout(t);
  }
}
