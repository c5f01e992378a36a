/**
 * What a running attempt can do with its capability token, whichever dialect carries the calls:
 * the internal listener's (a {@link Worker}'s task) or the task-scoped one (`/v1/task/*`, a
 * {@link TaskScope} or a push target).
 * @module
 */
import { canonicalFileRoot, putS3Object, writeFileObject, type StorageCredentials } from "./blob.js";
import { ApiError, NonRetryable, TaskError } from "./errors.js";
import { jsonCall, type Transport } from "./http.js";
import type {
  DatasetRow,
  DatasetRowPage,
  EventsAnswer,
  JsonValue,
  PipelineTaskInput,
  PipelineTaskJob,
  PipelineTaskOutput,
  PipelineTaskTrigger,
  QueryResult,
  UpstreamEvent,
} from "./wire.js";

/** The header that carries an attempt's capability token. */
export const CAPABILITY_HEADER = "X-Trace-Task-Capability";

/** The data plane of a pipeline job's task. */
export interface PipelineTask {
  job: PipelineTaskJob;
  operator: string;
  inputs: PipelineTaskInput[];
  outputs: PipelineTaskOutput[];
  trigger?: PipelineTaskTrigger;
}

/** A batch published with {@link Task.publishBatch}. */
export interface PublishedBatch {
  /** Where the batch file is. */
  uri: string;
  /** Its rows. */
  rows: number;
  /** The same batch of this attempt was published before. */
  duplicate: boolean;
}

/** Options of {@link Task.rows}. */
export interface TaskRowsOptions {
  /** Narrows the rows (ANDed with the input's own `where`). */
  where?: Record<string, unknown>;
  /** Only the batch with this dataset cursor (`0`: every batch). */
  cursor?: number;
  /** Rows per request, 1 to 1000. */
  pageSize?: number;
  signal?: AbortSignal;
}

/** Per-call options of a task's calls. */
export interface TaskCallOptions {
  signal?: AbortSignal;
}

/**
 * What a handler gets: one attempt of a task, with the calls its capability token allows. A
 * {@link Worker}'s tasks, {@link runLocal}'s fake and the tasks of a push target all have this
 * shape.
 */
export interface Task {
  /** The task's global id (UUID). */
  readonly id: string;
  /** The job's id. */
  readonly jobId: string;
  /** The producer's `taskId` (for a pipeline task, its pipeline job's name). */
  readonly key: string;
  /** The task's name: what to run. */
  readonly name: string;
  /** The attempt number, from 1. */
  readonly attempt: number;
  /** The task's input exactly as submitted (`{}` when none); a pipeline task's config. */
  readonly input: JsonValue;
  /** Each parent's output by the parent's taskId. */
  readonly parents: Record<string, JsonValue>;
  /** The execution timeout in milliseconds, or undefined for none. */
  readonly timeoutMs: number | undefined;
  /** The W3C trace context of the task's job, when it has one. */
  readonly traceparent: string | undefined;
  /** Set for a task of a pipeline job. */
  readonly pipeline: PipelineTask | undefined;
  /** The newest capability token of the attempt. */
  readonly capabilityToken: string;
  /** Aborted when the task is cancelled, its lease is lost, its timeout passes or the worker shuts down. */
  readonly signal: AbortSignal;
  /** True once cancellation was requested or the lease was lost; readable inside a busy loop. */
  shouldCancel(): boolean;
  /** Asks for a heartbeat now (heartbeats are otherwise sent on their own). */
  heartbeat(): Promise<void>;
  /** Publishes rows (JSON values) as one batch of the buffered output `dataset` (name or uuid). */
  publishBatch(dataset: string, rows: readonly unknown[], opts?: TaskCallOptions): Promise<PublishedBatch>;
  /** Reads the rows of a dataset the task reads or writes (name or uuid), page by page. */
  rows(dataset: string | PipelineTaskInput, opts?: TaskRowsOptions): AsyncGenerator<DatasetRow, void, undefined>;
  /** Queries the task's datasets (read-only SQL). */
  query(sql: string, opts?: TaskCallOptions & { limit?: number }): Promise<QueryResult>;
  /** Object storage credentials for the attempt's prefixes (S3 only: 501 otherwise). */
  credentials(opts?: TaskCallOptions): Promise<StorageCredentials>;
  /** Reports upstream dataset events. */
  events(events: UpstreamEvent[], opts?: TaskCallOptions): Promise<EventsAnswer>;
  /** The values of the secrets the pipeline job declares. */
  secrets(opts?: TaskCallOptions): Promise<Record<string, string>>;
  /** One secret's value; throws when the task has no such secret. */
  secret(name: string, opts?: TaskCallOptions): Promise<string>;
}

/** The paths of an attempt's own calls in one dialect. */
export interface Routes {
  publish: string;
  credentials: string;
  /** Prefix of `{dataset}/rows`. */
  rows: string;
  query: string;
  events: string;
  /** Undefined: the dialect has none. */
  secrets?: string;
  heartbeat: string;
  complete: string;
}

/** The internal listener's routes (a trusted worker). */
export const INTERNAL_ROUTES: Routes = {
  publish: "/internal/buffer-publish",
  credentials: "/internal/task-credentials",
  rows: "/internal/task-datasets/",
  query: "/internal/task-query",
  events: "/internal/events",
  secrets: "/internal/task-secrets",
  heartbeat: "/internal/heartbeat",
  complete: "/internal/task-complete",
};

/** The public listener's task-scoped routes (untrusted code, push targets). */
export const SCOPED_ROUTES: Routes = {
  publish: "/v1/task/buffer-publish",
  credentials: "/v1/task/credentials",
  rows: "/v1/task/datasets/",
  query: "/v1/task/query",
  events: "/v1/task/events",
  heartbeat: "/v1/task/heartbeat",
  complete: "/v1/task/complete",
};

/** The buffer prefix of an attempt's batches of one dataset, under the storage root. */
export function bufferPrefix(datasetUUID: string, taskId: string, attempt: number): string {
  return `buffers/${datasetUUID}/${taskId}/${attempt}/`;
}

/** The JSONL text of `rows`: one JSON value a line. */
export function toJsonl(rows: readonly unknown[]): string {
  if (!Array.isArray(rows)) throw new TypeError("baton: publishBatch: rows must be an array");
  let out = "";
  rows.forEach((r, i) => {
    let line: string | undefined;
    try {
      line = JSON.stringify(r);
    } catch (e) {
      throw new TypeError(`baton: publishBatch: row ${i + 1}: ${(e as Error).message}`);
    }
    if (line === undefined) throw new TypeError(`baton: publishBatch: row ${i + 1} is not a JSON value`);
    out += line + "\n";
  });
  return out;
}

/** Reads the claims of a JWT without verifying it (the server verifies it). */
export function tokenClaims(token: string): Record<string, unknown> {
  const parts = token.split(".");
  if (parts.length !== 3) return {};
  try {
    return JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8")) as Record<string, unknown>;
  } catch {
    return {};
  }
}

/**
 * The calls of one attempt in one dialect. A {@link Worker}'s task, a {@link TaskScope} and a
 * push target's task build on it.
 * @internal
 */
export class AttemptCalls {
  private batches = 0;

  constructor(
    readonly transport: Transport,
    readonly base: string,
    readonly routes: Routes,
    readonly ids: { taskId: string; attempt: number; lease: string },
    private readonly getToken: () => string,
    /** The server's object storage root, when this process may write it directly (file://). */
    readonly blobUrl: string | undefined,
  ) {}

  fence(): { task_id: string; attempt: number; lease_token: string } {
    return { task_id: this.ids.taskId, attempt: this.ids.attempt, lease_token: this.ids.lease };
  }

  headers(): Record<string, string> {
    const t = this.getToken();
    return t ? { [CAPABILITY_HEADER]: t } : {};
  }

  post<T>(path: string, extra: Record<string, unknown>, signal?: AbortSignal, timeoutMs = 30_000): Promise<T> {
    return jsonCall<T>(this.transport, this.base, "POST", path, { ...this.fence(), ...extra }, { headers: this.headers(), signal, timeoutMs });
  }

  get<T>(path: string, signal?: AbortSignal): Promise<T> {
    return jsonCall<T>(this.transport, this.base, "GET", path, undefined, { headers: this.headers(), signal, timeoutMs: 30_000 });
  }

  credentials(signal?: AbortSignal): Promise<StorageCredentials> {
    return this.post<StorageCredentials>(this.routes.credentials, {}, signal);
  }

  query(sql: string, limit: number | undefined, signal?: AbortSignal): Promise<QueryResult> {
    if (typeof sql !== "string" || sql.trim() === "") throw new TypeError("baton: query needs an SQL statement");
    const body: Record<string, unknown> = { sql };
    if (limit !== undefined) body.limit = limit;
    return this.post<QueryResult>(this.routes.query, body, signal, 330_000);
  }

  events(events: UpstreamEvent[], signal?: AbortSignal): Promise<EventsAnswer> {
    if (!Array.isArray(events) || events.length === 0) throw new TypeError("baton: events needs a non-empty array of events");
    return this.post<EventsAnswer>(this.routes.events, { events }, signal);
  }

  async *rows(dataset: string | PipelineTaskInput, opts: TaskRowsOptions = {}): AsyncGenerator<DatasetRow, void, undefined> {
    const name = typeof dataset === "string" ? dataset : dataset?.dataset_uuid;
    if (typeof name !== "string" || name === "") throw new TypeError("baton: rows needs a dataset name or uuid, or an input with a dataset_uuid");
    const q = new URLSearchParams();
    if (opts.where !== undefined) q.set("where", JSON.stringify(opts.where));
    if (opts.cursor !== undefined) q.set("cursor", String(opts.cursor));
    if (opts.pageSize !== undefined) q.set("limit", String(opts.pageSize));
    for (;;) {
      const page = await this.get<DatasetRowPage>(`${this.routes.rows}${encodeURIComponent(name)}/rows?${q}`, opts.signal);
      yield* page.rows;
      if (page.next_after === null || page.next_after === undefined) return;
      q.set("after", String(page.next_after));
    }
  }

  /** Writes a JSONL batch to the object storage and records it with buffer-publish. */
  async publish(outputs: readonly PipelineTaskOutput[], dataset: string, jsonl: string, signal?: AbortSignal): Promise<PublishedBatch> {
    if (typeof dataset !== "string" || dataset === "") throw new TypeError("baton: publishBatch needs the dataset's name");
    if (typeof jsonl !== "string") throw new TypeError("baton: publishJsonl needs JSONL text");
    const out = outputs.find(
      (o) => o.write_mode === "buffered" && (o.dataset_name === dataset || o.dataset_uuid === dataset),
    );
    if (!out) {
      const names = outputs.filter((o) => o.write_mode === "buffered").map((o) => JSON.stringify(o.dataset_name || o.dataset_uuid));
      throw new NonRetryable(
        `baton: publishBatch: dataset ${JSON.stringify(dataset)} is not a buffered output of this task's job (its outputs: ${
          names.length ? names.join(", ") : "no buffered dataset"
        }): only tasks of the pipeline job that publishes a buffered dataset may publish batches into it`,
      );
    }
    const rows = jsonl === "" ? 0 : jsonl.split("\n").length - (jsonl.endsWith("\n") ? 1 : 0);
    const name = `batch-${String(++this.batches).padStart(4, "0")}.jsonl`;
    const key = bufferPrefix(out.dataset_uuid, this.ids.taskId, this.ids.attempt) + name;
    const uri = await this.write(out.dataset_uuid, key, name, jsonl, signal);
    let ans: { duplicate?: boolean };
    try {
      ans = await this.post<{ duplicate?: boolean }>(
        this.routes.publish,
        {
          dataset_uuid: out.dataset_uuid,
          batch_uri: uri,
          record_count: rows,
          content_type: "application/jsonl",
          batch_size_bytes: Buffer.byteLength(jsonl),
        },
        signal,
      );
    } catch (e) {
      if (e instanceof ApiError && e.code === "dataset_version_not_current") throw new NonRetryable(e.message, { cause: e });
      throw e;
    }
    return { uri, rows, duplicate: ans?.duplicate === true };
  }

  private async write(datasetUUID: string, key: string, name: string, data: string, signal?: AbortSignal): Promise<string> {
    if (this.blobUrl && /^file:/i.test(this.blobUrl)) {
      return writeFileObject(canonicalFileRoot(this.blobUrl) + key, data);
    }
    // A file:// write prefix in the token: a directory store this process can reach.
    const s3 = tokenClaims(this.getToken()).s3 as { write_prefixes?: string[] } | undefined;
    const own = `/${bufferPrefix(datasetUUID, this.ids.taskId, this.ids.attempt)}`;
    const filePrefix = s3?.write_prefixes?.find((p) => p.startsWith("file:") && p.endsWith(own));
    if (filePrefix && !this.blobUrl) return writeFileObject(canonicalFileRoot(filePrefix) + name, data);
    let creds: StorageCredentials;
    try {
      creds = await this.credentials(signal);
    } catch (e) {
      if (e instanceof ApiError && e.code === "credentials_unavailable") {
        throw new TaskError(
          "CONFIGURATION",
          "baton: publishBatch: no object storage for batches: the server's storage is not S3 and no file:// storage is known (set BATON_BLOB_URL or the blobUrl option)",
          { cause: e },
        );
      }
      throw e;
    }
    const prefix = (creds.write_prefixes ?? []).find((p) => p.startsWith("s3://") && p.endsWith(own));
    if (!prefix) {
      throw new NonRetryable(`baton: publishBatch: the attempt's credentials grant no write prefix ending in ${own}`);
    }
    return putS3Object(creds, prefix + name, data, "application/jsonl", signal);
  }
}

/** The fields every {@link Task} has, read from a claim or from a push envelope. */
export interface TaskFields {
  id: string;
  jobId: string;
  key: string;
  name: string;
  attempt: number;
  input: JsonValue;
  parents: Record<string, JsonValue>;
  timeoutMs: number | undefined;
  traceparent: string | undefined;
  pipeline: PipelineTask | undefined;
}

/**
 * A {@link Task} whose dataset, query, storage and event calls go through its attempt's
 * {@link AttemptCalls}: a Worker's attempts and a push target's tasks differ only in how they
 * heartbeat, learn of cancellation and get secrets.
 */
export abstract class CallingTask implements Task {
  readonly id: string;
  readonly jobId: string;
  readonly key: string;
  readonly name: string;
  readonly attempt: number;
  readonly input: JsonValue;
  readonly parents: Record<string, JsonValue>;
  readonly timeoutMs: number | undefined;
  readonly traceparent: string | undefined;
  readonly pipeline: PipelineTask | undefined;
  abstract readonly calls: AttemptCalls;
  abstract readonly signal: AbortSignal;
  abstract readonly capabilityToken: string;

  constructor(f: TaskFields) {
    this.id = f.id;
    this.jobId = f.jobId;
    this.key = f.key;
    this.name = f.name;
    this.attempt = f.attempt;
    this.input = f.input;
    this.parents = f.parents;
    this.timeoutMs = f.timeoutMs;
    this.traceparent = f.traceparent;
    this.pipeline = f.pipeline;
  }

  abstract shouldCancel(): boolean;
  abstract heartbeat(): Promise<void>;
  abstract secrets(opts?: TaskCallOptions): Promise<Record<string, string>>;
  abstract secret(name: string, opts?: TaskCallOptions): Promise<string>;

  publishBatch(dataset: string, rows: readonly unknown[], opts: TaskCallOptions = {}): Promise<PublishedBatch> {
    return this.calls.publish(this.pipeline?.outputs ?? [], dataset, toJsonl(rows), opts.signal);
  }

  /** Publishes JSONL text (one JSON object a line) as one batch. */
  publishJsonl(dataset: string, jsonl: string, opts: TaskCallOptions = {}): Promise<PublishedBatch> {
    return this.calls.publish(this.pipeline?.outputs ?? [], dataset, jsonl, opts.signal);
  }

  rows(dataset: string | PipelineTaskInput, opts?: TaskRowsOptions): AsyncGenerator<DatasetRow, void, undefined> {
    return this.calls.rows(dataset, opts);
  }

  query(sql: string, opts: TaskCallOptions & { limit?: number } = {}): Promise<QueryResult> {
    return this.calls.query(sql, opts.limit, opts.signal);
  }

  credentials(opts: TaskCallOptions = {}): Promise<StorageCredentials> {
    return this.calls.credentials(opts.signal);
  }

  events(events: UpstreamEvent[], opts: TaskCallOptions = {}): Promise<EventsAnswer> {
    return this.calls.events(events, opts.signal);
  }
}
