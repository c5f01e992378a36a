/**
 * The producer client: jobs, their events over Server-Sent Events, pipelines, datasets, the
 * Query Service and user code bundles, on the server's public listener with an API key.
 * @module
 */
import { ApiError } from "./errors.js";
import { apiErrorOf, Backoff, baseUrl, isTransient, sleep } from "./http.js";
import type {
  AddTasksRequest,
  Bundle,
  BundleList,
  CreateJobRequest,
  Dataset,
  DatasetRow,
  DatasetRowPage,
  Event,
  EventPage,
  JobCreated,
  JobDetail,
  JobList,
  JobListItem,
  JobResumed,
  JobStatus,
  JobSummary,
  Pipeline,
  PipelineDeployed,
  QueryResult,
  Rollback,
  TaskDetail,
  TasksAdded,
} from "./wire.js";

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** The server's public listener, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** A producer API key, sent as `x-api-key`. */
  apiKey: string;
  /** How many times an idempotent request is retried on 429, 503 or a network error (default 4). */
  maxRetries?: number;
  /** Sent as `User-Agent`. */
  userAgent?: string;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** Options of {@link Client.submit}. */
export interface SubmitOptions extends CallOptions {
  /**
   * Makes the submission safe to repeat: the same key with the same body answers the first job
   * again. With a key, the client retries the submission on 429 and 503 like a GET.
   */
  idempotencyKey?: string;
  /** A W3C trace context for the job. */
  traceparent?: string;
}

/** Options of {@link Client.list}. */
export interface ListOptions extends CallOptions {
  /** Only jobs in this status. */
  status?: JobStatus;
  /** Page size, 1 to 100 (the server's default is 20). */
  pageSize?: number;
}

/** Options of {@link Client.watch}. */
export interface WatchOptions extends CallOptions {
  /** Start after this event id (default 0: from the first event). */
  after?: number;
  /** How many times in a row a broken stream is reconnected before the iterator throws (default: forever). */
  maxReconnects?: number;
}

/** The last item of {@link Client.watch}: the job finished. */
export interface WatchEnd {
  /** Always `"end"`. */
  type: "end";
  /** Discriminates it from an {@link Event}. */
  end: true;
  jobId: string;
  /** The job's final status. */
  status: JobStatus;
}

/** Options of {@link DatasetsApi.rows}. */
export interface RowsOptions extends CallOptions {
  /** Column → value, or list of values: all must hold. */
  where?: Record<string, unknown>;
  /** Only the rows of the batch with this dataset cursor. */
  cursor?: number;
  /** Rows per page, 1 to 1000 (the server's default is 100). */
  pageSize?: number;
}

/** Options of {@link Client.query}. */
export interface QueryOptions extends CallOptions {
  /** At most this many rows. */
  limit?: number;
  /** Scopes the query to one dataset id. */
  datasetId?: string;
}

interface RequestSpec {
  method: string;
  path: string;
  body?: unknown;
  rawBody?: Uint8Array | string;
  contentType?: string;
  headers?: Record<string, string>;
  /** Safe to send twice: retried on 429, 503 and network errors. */
  retry?: boolean;
  signal?: AbortSignal;
}

function enc(s: string): string {
  if (typeof s !== "string" || s === "") throw new TypeError("baton: an id or name must be a non-empty string");
  return encodeURIComponent(s);
}

function query(q: Record<string, string | number | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== "") p.set(k, String(v));
  const s = p.toString();
  return s ? "?" + s : "";
}

/**
 * A client of Baton's producer API.
 *
 * ```ts
 * const client = new Client({ url: "http://127.0.0.1:8080", apiKey: process.env.BATON_API_KEY! });
 * const { jobId } = await client.submit({ tasks: [{ taskId: "a", name: "resize" }] });
 * for await (const e of client.watch(jobId)) console.log(e.type);
 * ```
 */
export class Client {
  /** The public listener's base URL. */
  readonly url: string;
  private readonly apiKey: string;
  private readonly maxRetries: number;
  private readonly userAgent: string | undefined;
  private readonly fetchImpl: typeof fetch;
  /** Pipelines: deploy, get, list, versions, rollback. */
  readonly pipelines: PipelinesApi;
  /** Datasets: get, list, rows, cutover. */
  readonly datasets: DatasetsApi;
  /** User code bundles: upload, list, get, disable. */
  readonly bundles: BundlesApi;

  constructor(opts: ClientOptions) {
    if (!opts || typeof opts !== "object") throw new TypeError("baton: new Client({url, apiKey})");
    this.url = baseUrl(opts.url, "Client url");
    if (typeof opts.apiKey !== "string" || opts.apiKey === "") throw new TypeError("baton: Client needs an apiKey");
    this.apiKey = opts.apiKey;
    this.maxRetries = opts.maxRetries ?? 4;
    if (!Number.isInteger(this.maxRetries) || this.maxRetries < 0) throw new TypeError("baton: maxRetries must be a non-negative integer");
    this.userAgent = opts.userAgent;
    this.fetchImpl = opts.fetch ?? fetch;
    this.pipelines = new PipelinesApi(this);
    this.datasets = new DatasetsApi(this);
    this.bundles = new BundlesApi(this);
  }

  /** @internal Sends one request, retrying it when allowed, and decodes the JSON answer. */
  async call<T>(r: RequestSpec): Promise<T> {
    const backoff = new Backoff(200, 10_000);
    for (let tries = 0; ; tries++) {
      try {
        return await this.once<T>(r);
      } catch (e) {
        if (r.signal?.aborted) throw r.signal.reason;
        const retryable = e instanceof ApiError ? e.status === 429 || e.status === 503 : isTransient(e);
        if (!r.retry || !retryable || tries >= this.maxRetries) throw e;
        await sleep(backoff.after(e), r.signal);
      }
    }
  }

  private headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { "x-api-key": this.apiKey, accept: "application/json" };
    if (this.userAgent) h["user-agent"] = this.userAgent;
    return { ...h, ...(extra ?? {}) };
  }

  private async once<T>(r: RequestSpec): Promise<T> {
    const headers = this.headers(r.headers);
    let body: string | Uint8Array | undefined;
    if (r.rawBody !== undefined) {
      body = r.rawBody;
      if (r.contentType) headers["content-type"] = r.contentType;
    } else if (r.body !== undefined) {
      body = JSON.stringify(r.body);
      headers["content-type"] = "application/json";
    }
    const req = `${r.method} ${r.path.split("?")[0]}`;
    let res: Response;
    try {
      res = await this.fetchImpl(this.url + r.path, { method: r.method, headers, body, signal: r.signal });
    } catch (e) {
      if (r.signal?.aborted) throw r.signal.reason;
      throw new Error(`baton: ${req}: ${(e as Error).message}`, { cause: e });
    }
    const text = await res.text();
    if (!res.ok) throw apiErrorOf(res.status, text, res.headers.get("retry-after"), req);
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new Error(`baton: ${req}: the answer is not JSON: ${text.slice(0, 200)}`);
    }
  }

  /**
   * Submits a job (`POST /jobs`). With `idempotencyKey`, submitting the same body again answers
   * the first job; the call is then retried on 429 and 503.
   */
  submit(job: CreateJobRequest, opts: SubmitOptions = {}): Promise<JobCreated> {
    if (!job || typeof job !== "object" || !Array.isArray(job.tasks)) throw new TypeError("baton: submit needs a job document with a tasks array");
    const headers: Record<string, string> = {};
    if (opts.idempotencyKey !== undefined) {
      if (typeof opts.idempotencyKey !== "string" || opts.idempotencyKey === "") throw new TypeError("baton: idempotencyKey must be a non-empty string");
      headers["idempotency-key"] = opts.idempotencyKey;
    }
    if (opts.traceparent) headers["traceparent"] = opts.traceparent;
    // The same bytes on every try: the server compares the raw body of a repeated key.
    return this.call<JobCreated>({
      method: "POST",
      path: "/jobs",
      rawBody: JSON.stringify(job),
      contentType: "application/json",
      headers,
      retry: opts.idempotencyKey !== undefined,
      signal: opts.signal,
    });
  }

  /** The job and every task (`GET /jobs/{jobId}`). */
  get(jobId: string, opts: CallOptions = {}): Promise<JobDetail> {
    return this.call({ method: "GET", path: `/jobs/${enc(jobId)}`, retry: true, signal: opts.signal });
  }

  /** One task by its taskId or global id (`GET /jobs/{jobId}/tasks/{taskId}`). */
  getTask(jobId: string, taskId: string, opts: CallOptions = {}): Promise<TaskDetail> {
    return this.call({ method: "GET", path: `/jobs/${enc(jobId)}/tasks/${enc(taskId)}`, retry: true, signal: opts.signal });
  }

  /** One page of the tenant's jobs, newest first (`GET /jobs`). */
  listPage(opts: ListOptions & { cursor?: string } = {}): Promise<JobList> {
    return this.call({
      method: "GET",
      path: "/jobs" + query({ limit: opts.pageSize, cursor: opts.cursor, status: opts.status }),
      retry: true,
      signal: opts.signal,
    });
  }

  /** Every job of the tenant, newest first, page by page. */
  async *list(opts: ListOptions = {}): AsyncGenerator<JobListItem, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listPage({ ...opts, cursor });
      yield* page.jobs;
      if (!page.nextCursor) return;
      cursor = page.nextCursor;
    }
  }

  /** One page of the job's events (`GET /jobs/{jobId}/events`). */
  events(jobId: string, opts: CallOptions & { after?: number; limit?: number } = {}): Promise<EventPage> {
    return this.call({ method: "GET", path: `/jobs/${enc(jobId)}/events` + query({ after: opts.after, limit: opts.limit }), retry: true, signal: opts.signal });
  }

  /**
   * Follows the job's events live over Server-Sent Events, oldest first: every event after
   * `after`, then each new one, and last a {@link WatchEnd} once the job finished. A broken stream
   * is reopened (jittered backoff, Retry-After honoured) from the last event id received, sent as
   * `Last-Event-ID`, so no event is lost or repeated.
   */
  async *watch(jobId: string, opts: WatchOptions = {}): AsyncGenerator<Event | WatchEnd, void, undefined> {
    const path = `/jobs/${enc(jobId)}/events`;
    let last = opts.after ?? 0;
    const backoff = new Backoff(200, 10_000);
    let failures = 0;
    for (;;) {
      let res: Response | undefined;
      let err: unknown;
      try {
        const headers = this.headers({ accept: "text/event-stream" });
        if (last > 0) headers["last-event-id"] = String(last);
        res = await this.fetchImpl(this.url + path, { headers, signal: opts.signal });
      } catch (e) {
        if (opts.signal?.aborted) throw opts.signal.reason;
        err = new Error(`baton: GET ${path}: ${(e as Error).message}`, { cause: e });
      }
      if (res && !res.ok) {
        const e = apiErrorOf(res.status, await res.text(), res.headers.get("retry-after"), `GET ${path}`);
        if (!e.transient) throw e;
        err = e;
      }
      if (res && res.ok && res.body) {
        try {
          for await (const m of parseSSE(res.body)) {
            if (m.event === "end") {
              const d = JSON.parse(m.data) as { jobId: string; status: JobStatus };
              yield { type: "end", end: true, jobId: d.jobId, status: d.status };
              return;
            }
            if (m.data === "") continue;
            const ev = JSON.parse(m.data) as Event;
            if (typeof ev.id === "number" && ev.id <= last) continue;
            if (typeof ev.id === "number") last = ev.id;
            failures = 0;
            backoff.reset();
            yield ev;
          }
          err = new Error(`baton: GET ${path}: the event stream ended before the job did`);
        } catch (e) {
          if (opts.signal?.aborted) throw opts.signal.reason;
          if (e instanceof SyntaxError) throw new Error(`baton: GET ${path}: an event is not JSON: ${e.message}`);
          err = e;
        }
      }
      failures++;
      if (opts.maxReconnects !== undefined && failures > opts.maxReconnects) throw err;
      await sleep(backoff.after(err), opts.signal);
    }
  }

  /** Cancels the job (`POST /jobs/{jobId}/cancel`). */
  cancel(jobId: string, opts: CallOptions = {}): Promise<JobSummary> {
    return this.call({ method: "POST", path: `/jobs/${enc(jobId)}/cancel`, retry: true, signal: opts.signal });
  }

  /** Gives the job's failed, canceled and skipped tasks another run (`POST /jobs/{jobId}/resume`). */
  resume(jobId: string, opts: CallOptions = {}): Promise<JobResumed> {
    return this.call({ method: "POST", path: `/jobs/${enc(jobId)}/resume`, retry: true, signal: opts.signal });
  }

  /** Adds tasks to a running job (`POST /jobs/{jobId}/tasks`). */
  addTasks(jobId: string, req: AddTasksRequest, opts: CallOptions = {}): Promise<TasksAdded> {
    if (!req || !Array.isArray(req.tasks)) throw new TypeError("baton: addTasks needs {tasks: [...]}");
    return this.call({ method: "POST", path: `/jobs/${enc(jobId)}/tasks`, body: req, signal: opts.signal });
  }

  /** Runs a read-only SQL statement over the tenant's datasets (`POST /v1/query`). */
  query(sql: string, opts: QueryOptions = {}): Promise<QueryResult> {
    if (typeof sql !== "string" || sql.trim() === "") throw new TypeError("baton: query needs an SQL statement");
    const body: Record<string, unknown> = { sql };
    if (opts.limit !== undefined) body.limit = opts.limit;
    if (opts.datasetId !== undefined) body.dataset_id = opts.datasetId;
    return this.call({ method: "POST", path: "/v1/query", body, retry: true, signal: opts.signal });
  }
}

/** Pipelines of a {@link Client}. */
export class PipelinesApi {
  /** @internal */
  constructor(private readonly c: Client) {}

  /**
   * Deploys a pipeline document (`POST /pipelines`): YAML text, or an object sent as JSON. The
   * same content again creates no version. `activate` is the server's `?activate=` choice.
   */
  deploy(document: string | object, opts: CallOptions & { activate?: string } = {}): Promise<PipelineDeployed> {
    const isText = typeof document === "string";
    if (!isText && (document === null || typeof document !== "object")) throw new TypeError("baton: deploy needs YAML text or a document object");
    return this.c.call({
      method: "POST",
      path: "/pipelines" + query({ activate: opts.activate }),
      rawBody: isText ? document : JSON.stringify(document),
      contentType: isText ? "application/yaml" : "application/json",
      retry: true,
      signal: opts.signal,
    });
  }

  /** A pipeline with its active version's jobs (`GET /pipelines/{name}`). */
  get(name: string, opts: CallOptions = {}): Promise<Pipeline> {
    return this.c.call({ method: "GET", path: `/pipelines/${enc(name)}`, retry: true, signal: opts.signal });
  }

  /** The tenant's pipelines (`GET /pipelines`). */
  async list(opts: CallOptions = {}): Promise<Pipeline[]> {
    const out = await this.c.call<{ pipelines: Pipeline[] }>({ method: "GET", path: "/pipelines", retry: true, signal: opts.signal });
    return out.pipelines ?? [];
  }

  /** Makes an earlier version active (default: the one before the active one). */
  rollback(name: string, opts: CallOptions & { version?: string } = {}): Promise<Rollback> {
    const body = opts.version ? { version: opts.version } : {};
    return this.c.call({ method: "POST", path: `/pipelines/${enc(name)}/rollback`, body, signal: opts.signal });
  }
}

/** Datasets of a {@link Client}. */
export class DatasetsApi {
  /** @internal */
  constructor(private readonly c: Client) {}

  /** A dataset with its versions (`GET /datasets/{name}`). */
  get(name: string, opts: CallOptions = {}): Promise<Dataset> {
    return this.c.call({ method: "GET", path: `/datasets/${enc(name)}`, retry: true, signal: opts.signal });
  }

  /** The tenant's datasets (`GET /datasets`). */
  async list(opts: CallOptions = {}): Promise<unknown[]> {
    const out = await this.c.call<{ datasets: unknown[] }>({ method: "GET", path: "/datasets", retry: true, signal: opts.signal });
    return out.datasets ?? [];
  }

  /** One page of a buffered dataset's rows (`GET /datasets/{name}/rows`). */
  rowsPage(name: string, opts: RowsOptions & { after?: number } = {}): Promise<DatasetRowPage> {
    return this.c.call({
      method: "GET",
      path:
        `/datasets/${enc(name)}/rows` +
        query({ where: opts.where ? JSON.stringify(opts.where) : undefined, cursor: opts.cursor, after: opts.after, limit: opts.pageSize }),
      retry: true,
      signal: opts.signal,
    });
  }

  /** Every row of a buffered dataset, oldest first, page by page. */
  async *rows(name: string, opts: RowsOptions = {}): AsyncGenerator<DatasetRow, void, undefined> {
    let after: number | undefined;
    for (;;) {
      const page = await this.rowsPage(name, { ...opts, after });
      yield* page.rows;
      if (page.next_after === null || page.next_after === undefined) return;
      after = page.next_after;
    }
  }

  /** Switches the dataset's current version to a registered one (`POST /datasets/{name}/current`). */
  cutover(name: string, version: string, opts: CallOptions = {}): Promise<Dataset> {
    if (typeof version !== "string" || version === "") throw new TypeError("baton: cutover needs a dataset version");
    return this.c.call({ method: "POST", path: `/datasets/${enc(name)}/current`, body: { dataset_version: version }, retry: true, signal: opts.signal });
  }
}

/** User code bundles of a {@link Client}. */
export class BundlesApi {
  /** @internal */
  constructor(private readonly c: Client) {}

  /** Uploads a bundle's zip (`POST /v1/udf/bundles`). */
  upload(zip: Uint8Array, opts: CallOptions = {}): Promise<Bundle> {
    if (!(zip instanceof Uint8Array) || zip.length === 0) throw new TypeError("baton: upload needs the bundle's zip bytes");
    return this.c.call({ method: "POST", path: "/v1/udf/bundles", rawBody: zip, contentType: "application/zip", signal: opts.signal });
  }

  /** One page of the tenant's bundles, newest first. */
  listPage(opts: CallOptions & { limit?: number; cursor?: string } = {}): Promise<BundleList> {
    return this.c.call({ method: "GET", path: "/v1/udf/bundles" + query({ limit: opts.limit, cursor: opts.cursor }), retry: true, signal: opts.signal });
  }

  /** Every bundle of the tenant, newest first. */
  async *list(opts: CallOptions & { limit?: number } = {}): AsyncGenerator<Bundle, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listPage({ ...opts, cursor });
      yield* page.bundles;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** One bundle, with its manifest. */
  get(id: string, opts: CallOptions = {}): Promise<Bundle> {
    return this.c.call({ method: "GET", path: `/v1/udf/bundles/${enc(id)}`, retry: true, signal: opts.signal });
  }

  /** Disables a bundle for good: its tasks fail instead of running it. */
  disable(id: string, opts: CallOptions = {}): Promise<Bundle> {
    return this.c.call({ method: "POST", path: `/v1/udf/bundles/${enc(id)}/disable`, retry: true, signal: opts.signal });
  }
}

/** One message of a Server-Sent Events stream. */
export interface SSEMessage {
  id?: string;
  event: string;
  data: string;
}

/** Parses a Server-Sent Events byte stream into messages (comments and retry fields skipped). */
export async function* parseSSE(body: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>): AsyncGenerator<SSEMessage, void, undefined> {
  const decoder = new TextDecoder();
  let buf = "";
  let data: string[] = [];
  let event = "";
  let id: string | undefined;
  const source = body as AsyncIterable<Uint8Array>;
  const flushLine = function* (line: string): Generator<SSEMessage> {
    if (line === "") {
      if (data.length > 0 || event) {
        yield { id, event: event || "message", data: data.join("\n") };
      }
      data = [];
      event = "";
      id = undefined;
      return;
    }
    if (line.startsWith(":")) return;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? "" : line.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") event = value;
    else if (field === "id") id = value;
  };
  for await (const chunk of source) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf[nl] === "\r" && buf[nl + 1] === "\n" ? 2 : 1));
      yield* flushLine(line);
    }
  }
  buf += decoder.decode();
  if (buf) yield* flushLine(buf);
  yield* flushLine("");
}
