/**
 * The task-scoped client: what untrusted code — a `baton worker --exec` child or a user code
 * bundle — can do for its own attempt with nothing but its capability token, on the public
 * listener's `/v1/task/*` (docs/contracts/task-scoped.md).
 * @module
 */
import { appendFile, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { StorageCredentials } from "./blob.js";
import { isCategory } from "./errors.js";
import { baseUrl, fetchTransport, type Transport } from "./http.js";
import { AttemptCalls, SCOPED_ROUTES, tokenClaims, toJsonl, type PipelineTask, type PublishedBatch, type TaskCallOptions, type TaskRowsOptions } from "./task.js";
import { failureOf } from "./worker.js";
import type {
  CompleteAnswer,
  CompleteRequest,
  DatasetRow,
  EventsAnswer,
  HeartbeatAnswer,
  JsonValue,
  PipelineTaskInput,
  PipelineTaskOutput,
  QueryResult,
  UpstreamEvent,
} from "./wire.js";

/** Options of a {@link TaskScope}. */
export interface TaskScopeOptions {
  /** The server's public listener (where `/v1/task/*` is served). */
  url: string;
  /** The attempt's capability token. */
  token: string;
  /** The task id; default: the token's `task_id` claim. */
  taskId?: string;
  /** The attempt; default: the token's `attempt` claim. */
  attempt?: number;
  /** The lease token; default: the token's `lease_token` claim. */
  leaseToken?: string;
  /** The task payload the child was given (its stdin or `BATON_TASK_PAYLOAD`). */
  payload?: Record<string, unknown>;
  /** The directory whose `NAME.jsonl` files the wrapper publishes (`BATON_BUFFER_DIR`). */
  bufferDir?: string;
  /** The server's object storage when this process may write it directly (`file:///dir`). */
  blobUrl?: string;
}

/** What a {@link TaskScope.complete} reports. */
export type Completion =
  | { status: "Completed"; output?: JsonValue; events?: UpstreamEvent[]; outputs?: Record<string, unknown>[]; datasets_published?: CompleteRequest["datasets_published"] }
  | { status: "Failed"; error: unknown; events?: UpstreamEvent[] }
  | { status: "Canceled"; events?: UpstreamEvent[] };

/**
 * The calls of one attempt with its capability token alone.
 *
 * ```ts
 * const scope = await TaskScope.fromEnv();        // in a `baton worker --exec` child or a bundle
 * await scope.heartbeat();
 * for await (const row of scope.rows("readings")) ...;
 * await scope.publishBatch("alerts", [{ id: 1 }]);
 * ```
 */
export class TaskScope {
  /** The public listener's base URL. */
  readonly url: string;
  /** The task id. */
  readonly taskId: string;
  /** The attempt. */
  readonly attempt: number;
  /** The lease token. */
  readonly leaseToken: string;
  /** The payload the child was given, when known. */
  readonly payload: Record<string, unknown> | undefined;
  /** `BATON_BUFFER_DIR`, when set. */
  readonly bufferDir: string | undefined;
  private tokenValue: string;
  private readonly calls: AttemptCalls;

  constructor(opts: TaskScopeOptions, transport: Transport = fetchTransport()) {
    if (!opts || typeof opts !== "object") throw new TypeError("baton: new TaskScope({url, token})");
    this.url = baseUrl(opts.url, "TaskScope url");
    if (typeof opts.token !== "string" || opts.token.split(".").length !== 3) throw new TypeError("baton: TaskScope needs the attempt's capability token (a JWT)");
    this.tokenValue = opts.token;
    const claims = tokenClaims(opts.token);
    const taskId = opts.taskId ?? (claims.task_id as string | undefined);
    const attempt = opts.attempt ?? (claims.attempt as number | undefined);
    const lease = opts.leaseToken ?? (claims.lease_token as string | undefined);
    if (typeof taskId !== "string" || taskId === "") throw new TypeError("baton: TaskScope: no task id (BATON_TASK_ID, or the token's task_id)");
    if (typeof attempt !== "number" || !Number.isInteger(attempt) || attempt < 1) throw new TypeError("baton: TaskScope: no attempt (BATON_ATTEMPT, or the token's attempt)");
    if (typeof lease !== "string" || lease === "") throw new TypeError("baton: TaskScope: no lease token (BATON_LEASE_TOKEN, or the token's lease_token)");
    this.taskId = taskId;
    this.attempt = attempt;
    this.leaseToken = lease;
    this.payload = opts.payload;
    this.bufferDir = opts.bufferDir;
    this.calls = new AttemptCalls(transport, this.url, SCOPED_ROUTES, { taskId, attempt, lease }, () => this.tokenValue, opts.blobUrl);
  }

  /**
   * The scope of the attempt the environment names: `TRACE_TASK_CAPABILITY_TOKEN`, `BATON_URL`,
   * `BATON_TASK_ID`, `BATON_ATTEMPT`, `BATON_LEASE_TOKEN` (or the token's claims), the payload
   * file `BATON_TASK_PAYLOAD` and `BATON_BUFFER_DIR`.
   */
  static async fromEnv(env: NodeJS.ProcessEnv = process.env): Promise<TaskScope> {
    const token = env.TRACE_TASK_CAPABILITY_TOKEN;
    const url = env.BATON_URL;
    if (!token) throw new Error("baton: TaskScope.fromEnv: TRACE_TASK_CAPABILITY_TOKEN is not set (run under `baton worker --exec` or as a bundle)");
    if (!url) throw new Error("baton: TaskScope.fromEnv: BATON_URL is not set");
    let payload: Record<string, unknown> | undefined;
    if (env.BATON_TASK_PAYLOAD) {
      try {
        payload = JSON.parse(await readFile(env.BATON_TASK_PAYLOAD, "utf8")) as Record<string, unknown>;
      } catch (e) {
        throw new Error(`baton: TaskScope.fromEnv: read the payload ${env.BATON_TASK_PAYLOAD}: ${(e as Error).message}`);
      }
    }
    const attempt = env.BATON_ATTEMPT ? Number(env.BATON_ATTEMPT) : undefined;
    if (attempt !== undefined && (!Number.isInteger(attempt) || attempt < 1)) throw new Error(`baton: TaskScope.fromEnv: BATON_ATTEMPT ${JSON.stringify(env.BATON_ATTEMPT)} is not a positive integer`);
    return new TaskScope({
      url,
      token,
      taskId: env.BATON_TASK_ID || undefined,
      attempt,
      leaseToken: env.BATON_LEASE_TOKEN || undefined,
      payload,
      bufferDir: env.BATON_BUFFER_DIR || undefined,
      blobUrl: env.BATON_BLOB_URL || undefined,
    });
  }

  /** The newest capability token (heartbeats renew it). */
  get token(): string {
    return this.tokenValue;
  }

  /** The task's input (the payload's `input`), when the payload is known. */
  get input(): JsonValue | undefined {
    return this.payload?.input as JsonValue | undefined;
  }

  /** The parents' outputs by taskId (the payload's `dependency_outputs`). */
  get parents(): Record<string, JsonValue> {
    return (this.payload?.dependency_outputs as Record<string, JsonValue> | undefined) ?? {};
  }

  /** The pipeline data plane (the payload's `job`, `operator`, `inputs`, `outputs`, `trigger`). */
  get pipeline(): PipelineTask | undefined {
    const p = this.payload;
    if (!p || !p.job) return undefined;
    return {
      job: p.job as PipelineTask["job"],
      operator: (p.operator as string) ?? "",
      inputs: (p.inputs as PipelineTaskInput[]) ?? [],
      outputs: (p.outputs as PipelineTaskOutput[]) ?? [],
      trigger: p.trigger as PipelineTask["trigger"],
    };
  }

  /** Extends the lease and says whether to stop; a fresh token in the answer replaces the scope's. */
  async heartbeat(opts: TaskCallOptions = {}): Promise<HeartbeatAnswer> {
    const ans = await this.calls.post<HeartbeatAnswer>(SCOPED_ROUTES.heartbeat, {}, opts.signal);
    if (ans?.capability_token) this.tokenValue = ans.capability_token;
    return ans;
  }

  /** Reports upstream dataset events (`/v1/task/events`). */
  events(events: UpstreamEvent[], opts: TaskCallOptions = {}): Promise<EventsAnswer> {
    return this.calls.events(events, opts.signal);
  }

  /**
   * Writes `rows` as one JSONL batch to the object storage (a `file://` store directly, S3 with
   * the attempt's minted credentials and a SigV4-signed PUT) and publishes it to the buffered
   * output `dataset` (`/v1/task/buffer-publish`). Needs the payload's `outputs`.
   */
  publishBatch(dataset: string, rows: readonly unknown[], opts: TaskCallOptions = {}): Promise<PublishedBatch> {
    return this.calls.publish(this.pipeline?.outputs ?? [], dataset, toJsonl(rows), opts.signal);
  }

  /** Appends rows to `$BATON_BUFFER_DIR/NAME.jsonl`, which the wrapper publishes once the child succeeded. */
  async bufferRows(dataset: string, rows: readonly unknown[]): Promise<string> {
    if (!this.bufferDir) throw new Error("baton: bufferRows: BATON_BUFFER_DIR is not set");
    if (!/^[A-Za-z0-9_.-]+$/.test(dataset) || dataset.startsWith(".")) throw new TypeError(`baton: bufferRows: ${JSON.stringify(dataset)} is not a dataset name`);
    const path = join(this.bufferDir, `${dataset}.jsonl`);
    await appendFile(path, toJsonl(rows));
    return path;
  }

  /** Object storage credentials for the attempt's prefixes (`/v1/task/credentials`; S3 only). */
  credentials(opts: TaskCallOptions = {}): Promise<StorageCredentials> {
    return this.calls.credentials(opts.signal);
  }

  /** The rows of a dataset the task reads or writes, page by page (`/v1/task/datasets/{dataset}/rows`). */
  rows(dataset: string | PipelineTaskInput, opts?: TaskRowsOptions): AsyncGenerator<DatasetRow, void, undefined> {
    return this.calls.rows(dataset, opts);
  }

  /** Queries the task's datasets (`/v1/task/query`). */
  query(sql: string, opts: TaskCallOptions & { limit?: number } = {}): Promise<QueryResult> {
    return this.calls.query(sql, opts.limit, opts.signal);
  }

  /**
   * Reports the attempt's outcome (`/v1/task/complete`). A `Failed` completion's `error` may be a
   * {@link TaskError} (its category and retry flag are reported) or any thrown value.
   */
  complete(c: Completion, opts: TaskCallOptions = {}): Promise<CompleteAnswer> {
    const body: Record<string, unknown> = { status: c.status };
    if (c.events) body.events = c.events;
    if (c.status === "Completed") {
      if (c.outputs !== undefined) body.outputs = c.outputs;
      else body.output = c.output === undefined ? null : c.output;
      if (c.datasets_published) body.datasets_published = c.datasets_published;
    } else if (c.status === "Failed") {
      const f = failureOf(c.error);
      body.error = { category: isCategory(f.code) ? f.code : "USER_CODE", message: f.message, stack_trace: f.stack, retryable: f.retryable };
    } else if (c.status !== "Canceled") {
      throw new TypeError(`baton: complete: status must be Completed, Failed or Canceled`);
    }
    return this.calls.post<CompleteAnswer>(SCOPED_ROUTES.complete, body, opts.signal);
  }

  /** @internal The scoped calls, for the push target's task. */
  get attemptCalls(): AttemptCalls {
    return this.calls;
  }
}

