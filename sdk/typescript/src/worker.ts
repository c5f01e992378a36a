/**
 * The worker: claims tasks from the server's internal listener (the stream-worker dialect's
 * `claim-batch` and `report-batch`), runs the handler registered for each task's name in one of N
 * slots, keeps the attempts' leases alive from a heartbeat thread, and reports the outcomes.
 * @module
 */
import { createServer, type Server } from "node:http";
import { hostname } from "node:os";
import { Worker as Thread } from "node:worker_threads";
import { AbortError, ApiError, RetryAfter, TaskError } from "./errors.js";
import { FLAG_CANCEL, FLAG_LOST, type FromThread, type ThreadData, type ToThread } from "./flags.js";
import { apiErrorOf, Backoff, baseUrl, fetchTransport, jsonCall, nodeTransport, sleep, type TlsOptions, type Transport } from "./http.js";
import { AttemptCalls, CallingTask, INTERNAL_ROUTES, type Task, type TaskCallOptions } from "./task.js";
import type { JsonValue, StreamClaim } from "./wire.js";

/** A handler: runs one attempt and returns its output (any JSON value; `undefined` is `null`). */
export type Handler = (task: Task) => unknown | Promise<unknown>;

/** Where the worker writes its log lines. */
export interface Logger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** Options of a {@link Worker}. */
export interface WorkerOptions {
  /** The server's internal listener, e.g. `http://127.0.0.1:8081`. */
  internalUrl: string;
  /** Concurrent slots: how many attempts run at once (default 1). */
  concurrency?: number;
  /** The queues to claim from, in priority order (default: the registered handlers' names, sorted). */
  queues?: string[];
  /** The worker's id (default `hostname-pid`). */
  workerId?: string;
  /** Heartbeat at least this often, in ms (default: the server's interval from the claim). */
  heartbeatIntervalMs?: number;
  /** The claim's long poll, in ms (default 20000, at most 60000). */
  pollWaitMs?: number;
  /** How long {@link Worker.stop} lets running handlers finish before handing them back (default 30000). */
  shutdownGraceMs?: number;
  /**
   * How long an aborted handler (lease lost) may take to return before the worker stops
   * waiting for it, frees its slot and forgets it (default 5000).
   */
  abortGraceMs?: number;
  /** Parallel claim loops (default 1); each claims for as many free slots as there are. */
  claimers?: number;
  /** Installs SIGTERM and SIGINT handlers that call {@link Worker.stop} while {@link Worker.run} runs (default true). */
  handleSignals?: boolean;
  /** Serves `GET /healthz` on this port (200 healthy, 503 not); 0 picks a free port. */
  healthPort?: number;
  /** The host the health server listens on (default 127.0.0.1). */
  healthHost?: string;
  /** Consecutive failed claims after which the worker is unhealthy (default 3). */
  unhealthyAfter?: number;
  /** The server's object storage when it is a directory (`file:///dir`): batches are written there. Default: env BATON_BLOB_URL. */
  blobUrl?: string;
  /** mTLS material for an `https://` internal listener. */
  tls?: TlsOptions;
  /** HTTP client of the internal dialect: `node` (node:http/https keep-alive agents, the default) or `fetch` (no client certificates). */
  transport?: "node" | "fetch";
  /** Where log lines go (default: warnings and errors on stderr). */
  logger?: Logger;
  /** Sent as `isolation` with claims (shown on the dashboard). */
  isolation?: string;
}

const MAX_BATCH = 256;
const REPORT_REQUESTS = 2;
const HAND_BACK_MS = 10_000;
const CLAIM_SLACK_MS = 15_000;
const GEN_MOD = 1 << 29;

const defaultLogger: Logger = {
  info() {},
  warn(msg, f) {
    console.error(`baton worker: ${msg}${f ? " " + JSON.stringify(f) : ""}`);
  },
  error(msg, f) {
    console.error(`baton worker: ${msg}${f ? " " + JSON.stringify(f) : ""}`);
  },
};

interface Failure {
  code: string;
  message: string;
  stack?: string;
  retryable?: boolean;
}

type Outcome = { kind: "completed"; output: string } | { kind: "failed"; failure: Failure } | { kind: "canceled" };

type Delivery = "delivered" | "not_ours" | "refused" | "abandoned";

interface ReportItem {
  type: "complete" | "fail";
  body: Record<string, unknown>;
  resolve: (r: { ok: true } | { err: unknown }) => void;
}

/** Truncates an error text so that a huge one cannot make the report too large. */
function truncate(s: string, max = 64 << 10): string {
  return s.length <= max ? s : s.slice(0, max) + "…(truncated)";
}

/** Classifies what a handler threw. */
export function failureOf(err: unknown): Failure {
  if (err instanceof TaskError) {
    return { code: err.code ?? err.category, message: truncate(err.message), stack: err.stack ? truncate(err.stack) : undefined, retryable: err.retryable };
  }
  if (err instanceof Error) {
    return { code: "USER_CODE", message: truncate(err.message || err.name), stack: err.stack ? truncate(err.stack) : undefined, retryable: true };
  }
  return { code: "USER_CODE", message: truncate(`non-Error thrown: ${safeString(err)}`), retryable: true };
}

function safeString(v: unknown): string {
  try {
    return typeof v === "string" ? v : JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/** One claimed attempt. */
class Attempt extends CallingTask {
  readonly signal: AbortSignal;
  readonly claim: StreamClaim;
  readonly controller = new AbortController();
  readonly calls: AttemptCalls;
  token: string;
  tokenExpiresAt: string;
  cancelRequested = false;
  lost = false;
  timedOut = false;
  forced = false;
  /** Resolves when the worker stops waiting for the handler (lost + grace, or forced). */
  giveUp!: () => void;
  readonly gaveUp: Promise<"gave_up">;
  private secretValues: Record<string, string> | undefined;

  constructor(
    private readonly w: Worker,
    c: StreamClaim,
    readonly slot: number,
    readonly gen: number,
    readonly everyMs: number,
  ) {
    super({
      id: c.task_id || c.job_id,
      jobId: c.run_id,
      key: c.task_key,
      name: c.task_name,
      attempt: c.attempt_id,
      input: c.payload,
      parents: (c.dependency_outputs ?? {}) as Record<string, JsonValue>,
      timeoutMs: typeof c.timeout_seconds === "number" && c.timeout_seconds > 0 ? c.timeout_seconds * 1000 : undefined,
      traceparent: c.traceparent,
      pipeline: c.job
        ? { job: c.job, operator: c.operator ?? c.task_name, inputs: c.inputs ?? [], outputs: c.outputs ?? [], trigger: c.trigger }
        : undefined,
    });
    this.claim = c;
    this.token = c.capability_token;
    this.tokenExpiresAt = c.capability_token_expires_at ?? "";
    this.signal = this.controller.signal;
    this.gaveUp = new Promise((resolve) => (this.giveUp = () => resolve("gave_up")));
    this.calls = new AttemptCalls(w.transport, w.internalUrl, INTERNAL_ROUTES, { taskId: c.job_id, attempt: c.attempt_id, lease: c.lease_token }, () => this.token, w.blobUrl);
  }

  get capabilityToken(): string {
    return this.token;
  }

  shouldCancel(): boolean {
    if (this.cancelRequested || this.lost) return true;
    const v = Atomics.load(this.w.flags, this.slot);
    return v >>> 2 === this.gen && (v & (FLAG_CANCEL | FLAG_LOST)) !== 0;
  }

  async heartbeat(): Promise<void> {
    this.w.post({ t: "beat", slot: this.slot, gen: this.gen });
  }

  async secrets(opts: TaskCallOptions = {}): Promise<Record<string, string>> {
    if (!this.pipeline?.job.secrets?.length) return {};
    if (!this.secretValues) {
      try {
        const ans = await this.calls.post<{ secrets?: Record<string, string> }>(INTERNAL_ROUTES.secrets!, {}, opts.signal);
        this.secretValues = ans?.secrets ?? {};
      } catch (e) {
        if (e instanceof ApiError && e.code === "secret_unavailable") throw new TaskError("CONFIGURATION", e.message, { retryable: false, cause: e });
        throw e;
      }
    }
    return { ...this.secretValues };
  }

  async secret(name: string, opts: TaskCallOptions = {}): Promise<string> {
    const all = await this.secrets(opts);
    if (!(name in all)) throw new Error(`baton: the task has no secret ${JSON.stringify(name)} (its job declares: ${(this.pipeline?.job.secrets ?? []).join(", ") || "none"})`);
    return all[name];
  }

  /** The secret values to keep out of reports. */
  redact(s: string): string {
    if (!this.secretValues) return s;
    for (const v of Object.values(this.secretValues)) if (v) s = s.split(v).join("[REDACTED]");
    return s;
  }

  abort(kind: AbortError["kind"], message: string): void {
    if (!this.controller.signal.aborted) this.controller.abort(new AbortError(kind, message));
  }
}

/**
 * A Baton worker.
 *
 * ```ts
 * const worker = new Worker({ internalUrl: "http://127.0.0.1:8081", concurrency: 4 });
 * worker.handle("resize", async (task) => ({ ok: true, input: task.input }));
 * await worker.run(); // until worker.stop(), SIGTERM or SIGINT
 * ```
 *
 * A handler's return completes the attempt with that output; a thrown {@link TaskError} fails it
 * with its category and retry flag; anything else thrown is a retryable `USER_CODE` failure with
 * its stack. Heartbeats run on their own thread; `task.signal` aborts (and `task.shouldCancel()`
 * turns true) when the task is cancelled (the attempt is then reported cancelled, whatever the
 * handler returns), when the lease is lost (nothing is reported; after `abortGraceMs` the slot is
 * freed without waiting for the handler), when its timeout passes, or at shutdown.
 */
export class Worker {
  /** @internal */ readonly internalUrl: string;
  /** @internal */ readonly transport: Transport;
  /** @internal */ readonly flags: Int32Array;
  /** @internal */ readonly blobUrl: string | undefined;
  /** The worker's id. */
  readonly workerId: string;
  private readonly opts: Required<Pick<WorkerOptions, "concurrency" | "pollWaitMs" | "shutdownGraceMs" | "abortGraceMs" | "claimers" | "unhealthyAfter">> &
    WorkerOptions;
  private readonly log: Logger;
  private readonly handlers = new Map<string, Handler>();
  private readonly flagsBuffer: SharedArrayBuffer;
  private readonly freeSlots: number[] = [];
  private readonly gens: number[];
  private readonly running = new Map<number, Attempt>();
  private slotWaiters: (() => void)[] = [];
  private thread: Thread | undefined;
  private started = false;
  private stopping = false;
  private stopRequested!: () => void;
  private readonly stopped: Promise<void>;
  private readonly claimAbort = new AbortController();
  private reportAbort = new AbortController();
  private reportQueue: ReportItem[] = [];
  private reportsInflight = 0;
  private reportFlushScheduled = false;
  private claimFailures = 0;
  private unreported = 0;
  private attemptsDone: Promise<void>[] = [];
  private health: Server | undefined;

  constructor(opts: WorkerOptions) {
    if (!opts || typeof opts !== "object") throw new TypeError("baton: new Worker({internalUrl, ...})");
    this.internalUrl = baseUrl(opts.internalUrl, "Worker internalUrl");
    const o = {
      ...opts,
      concurrency: opts.concurrency ?? 1,
      pollWaitMs: opts.pollWaitMs ?? 20_000,
      shutdownGraceMs: opts.shutdownGraceMs ?? 30_000,
      abortGraceMs: opts.abortGraceMs ?? 5_000,
      claimers: opts.claimers ?? 1,
      unhealthyAfter: opts.unhealthyAfter ?? 3,
    };
    const positiveInt = (n: number, what: string) => {
      if (!Number.isInteger(n) || n < 1) throw new TypeError(`baton: Worker ${what} must be a positive integer, got ${n}`);
    };
    positiveInt(o.concurrency, "concurrency");
    positiveInt(o.claimers, "claimers");
    positiveInt(o.unhealthyAfter, "unhealthyAfter");
    for (const [k, v] of [
      ["pollWaitMs", o.pollWaitMs],
      ["shutdownGraceMs", o.shutdownGraceMs],
      ["abortGraceMs", o.abortGraceMs],
      ["heartbeatIntervalMs", o.heartbeatIntervalMs ?? 0],
    ] as const) {
      if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new TypeError(`baton: Worker ${k} must be a non-negative number of milliseconds, got ${v}`);
    }
    if (o.pollWaitMs > 60_000) throw new TypeError(`baton: Worker pollWaitMs ${o.pollWaitMs} is above the server's limit of 60000`);
    if (o.queues !== undefined) {
      if (!Array.isArray(o.queues) || o.queues.some((q) => typeof q !== "string" || q === "")) throw new TypeError("baton: Worker queues must be non-empty strings");
    }
    if (o.transport !== undefined && o.transport !== "node" && o.transport !== "fetch") throw new TypeError(`baton: Worker transport must be "node" or "fetch"`);
    if (o.transport === "fetch" && (o.tls?.cert || o.tls?.key || o.tls?.ca)) throw new TypeError("baton: Worker: client certificates need the node transport");
    this.opts = o;
    this.workerId = o.workerId ?? `${hostname() || "worker"}-${process.pid}`;
    if (this.workerId === "" || Buffer.byteLength(this.workerId) > 256) throw new TypeError("baton: Worker workerId must be 1 to 256 bytes");
    this.log = o.logger ?? defaultLogger;
    this.blobUrl = o.blobUrl ?? (process.env.BATON_BLOB_URL || undefined);
    this.transport =
      o.transport === "fetch" ? fetchTransport() : nodeTransport({ maxSockets: Math.max(8, Math.min(o.concurrency + o.claimers + REPORT_REQUESTS + 4, 512)), tls: o.tls });
    this.flagsBuffer = new SharedArrayBuffer(4 * o.concurrency);
    this.flags = new Int32Array(this.flagsBuffer);
    this.gens = new Array(o.concurrency).fill(0);
    for (let i = o.concurrency - 1; i >= 0; i--) this.freeSlots.push(i);
    this.stopped = new Promise((resolve) => (this.stopRequested = resolve));
  }

  /** Registers `handler` for tasks named `name`, replacing an earlier one. */
  handle(name: string, handler: Handler): this {
    if (typeof name !== "string" || name === "") throw new TypeError("baton: handle needs a task name");
    if (typeof handler !== "function") throw new TypeError("baton: handle needs a handler function");
    this.handlers.set(name, handler);
    return this;
  }

  /** Whether the worker runs and its claims succeed (false after `unhealthyAfter` failed claims in a row). */
  healthy(): boolean {
    return this.started && !this.stopping && this.claimFailures < this.opts.unhealthyAfter;
  }

  /** The health server's port, once {@link Worker.run} started it. */
  get healthAddress(): { host: string; port: number } | undefined {
    const a = this.health?.address();
    return a && typeof a === "object" ? { host: a.address, port: a.port } : undefined;
  }

  /** Stops claiming; {@link Worker.run} then lets running handlers finish (within `shutdownGraceMs`) and resolves. */
  stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.claimAbort.abort(new Error("worker stopping"));
    for (const w of this.slotWaiters.splice(0)) w();
    this.stopRequested();
  }

  /**
   * Claims and runs tasks until {@link Worker.stop} (or SIGTERM/SIGINT with `handleSignals`),
   * then shuts down: stops claiming, waits up to `shutdownGraceMs` for running handlers, hands
   * back the attempts still running (a retryable `INFRASTRUCTURE` failure), delivers every
   * report and resolves. It rejects when it could not start, or when some outcome could not be
   * delivered before it gave up. A Worker runs once.
   */
  async run(): Promise<void> {
    if (this.started) throw new Error("baton: Worker.run called twice");
    const queues = this.opts.queues ?? [...this.handlers.keys()].sort();
    if (queues.length === 0) throw new Error("baton: Worker has no handlers registered and no queues given");
    this.started = true;
    const onSignal = () => {
      this.log.info("signal received: stopping");
      this.stop();
    };
    if (this.opts.handleSignals !== false) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      this.startThread();
      if (this.opts.healthPort !== undefined) await this.startHealth();
      this.log.info("worker started", { queues, concurrency: this.opts.concurrency, worker_id: this.workerId });
      const claimers: Promise<void>[] = [];
      for (let i = 0; i < this.opts.claimers; i++) claimers.push(this.claimLoop(queues));
      await this.stopped;
      await Promise.all(claimers);
      await this.drain();
    } finally {
      if (this.opts.handleSignals !== false) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      if (this.thread) {
        this.thread.postMessage({ t: "close" } satisfies ToThread);
        await this.thread.terminate().catch(() => undefined);
      }
      await new Promise<void>((resolve) => (this.health ? this.health.close(() => resolve()) : resolve()));
      this.transport.close();
    }
    if (this.unreported > 0) {
      throw new Error(`baton: ${this.unreported} attempt outcome(s) not delivered before shutdown; the server will time them out`);
    }
    this.log.info("worker stopped");
  }

  /** Waits for running attempts within the shutdown grace, then hands back the rest and delivers reports. */
  private async drain(): Promise<void> {
    const all = () => Promise.all([...this.attemptsDone]).then(() => "done" as const);
    const grace = new AbortController();
    const graceOver = sleep(this.opts.shutdownGraceMs, grace.signal).then(
      () => "timeout" as const,
      () => "done" as const,
    );
    const first = await Promise.race([all(), graceOver]);
    grace.abort();
    if (first === "timeout" && this.running.size > 0) {
      this.log.warn("shutdown grace passed: handing back running tasks", { grace_ms: this.opts.shutdownGraceMs, running: this.running.size });
      for (const a of this.running.values()) {
        a.forced = true;
        a.abort("shutdown", "the worker shut down before the task finished");
        a.giveUp();
      }
    }
    const hb = new AbortController();
    const handBack = sleep(HAND_BACK_MS, hb.signal).then(
      () => "timeout" as const,
      () => "done" as const,
    );
    const second = await Promise.race([all(), handBack]);
    hb.abort();
    if (second === "timeout") {
      this.reportAbort.abort(new Error("worker stopped"));
      await all();
    }
  }

  /** @internal Sends a message to the heartbeat thread. */
  post(m: ToThread): void {
    this.thread?.postMessage(m);
  }

  private startThread(): void {
    const data: ThreadData = {
      batonHeartbeat: true,
      url: this.internalUrl,
      workerId: this.workerId,
      flags: this.flagsBuffer,
      transport: this.opts.transport ?? "node",
      tls: this.opts.tls,
    };
    const t = new Thread(new URL("./heartbeat-thread.js", import.meta.url), { workerData: data });
    t.unref();
    t.on("message", (m: FromThread) => this.fromThread(m));
    t.on("error", (e) => this.log.error("heartbeat thread failed", { err: String(e) }));
    this.thread = t;
  }

  private fromThread(m: FromThread): void {
    if (m.t === "warn") {
      this.log.warn(m.message);
      return;
    }
    const a = this.running.get(m.slot);
    if (!a || a.gen !== m.gen) return;
    switch (m.t) {
      case "cancel":
        if (!a.cancelRequested) {
          a.cancelRequested = true;
          this.log.info("cancellation requested", { task_id: a.id, attempt: a.attempt, reason: m.reason });
          a.abort("cancel", `cancellation requested: ${m.reason}`);
        }
        break;
      case "lost":
        this.markLost(a, m.message);
        break;
      case "token":
        a.token = m.token;
        a.tokenExpiresAt = m.expiresAt;
        break;
    }
  }

  private markLost(a: Attempt, message: string): void {
    if (a.lost) return;
    a.lost = true;
    this.log.info("lease lost: stopping the handler", { task_id: a.id, attempt: a.attempt, err: message });
    a.abort("lease_lost", `the lease was lost: ${message}`);
    const t = setTimeout(() => a.giveUp(), this.opts.abortGraceMs);
    t.unref();
  }

  private async startHealth(): Promise<void> {
    const srv = createServer((req, res) => {
      const path = (req.url ?? "").split("?")[0];
      if (path !== "/healthz") {
        res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: "not found" }) + "\n");
        return;
      }
      const ok = this.healthy();
      res
        .writeHead(ok ? 200 : 503, { "content-type": "application/json" })
        .end(
          JSON.stringify({ status: ok ? "ok" : "unhealthy", worker_id: this.workerId, running: this.running.size, claim_failures: this.claimFailures }) + "\n",
        );
    });
    await new Promise<void>((resolve, reject) => {
      srv.once("error", reject);
      srv.listen(this.opts.healthPort, this.opts.healthHost ?? "127.0.0.1", () => resolve());
    });
    srv.unref();
    this.health = srv;
  }

  private waitSlot(): Promise<void> {
    if (this.freeSlots.length > 0 || this.stopping) return Promise.resolve();
    return new Promise((resolve) => this.slotWaiters.push(resolve));
  }

  private releaseSlot(slot: number): void {
    this.freeSlots.push(slot);
    const w = this.slotWaiters.shift();
    if (w) w();
  }

  private async claimLoop(queues: string[]): Promise<void> {
    const backoff = new Backoff();
    while (!this.stopping) {
      await this.waitSlot();
      if (this.stopping) return;
      const n = Math.min(this.freeSlots.length, MAX_BATCH);
      if (n === 0) continue;
      const slots = this.freeSlots.splice(this.freeSlots.length - n, n);
      let claims: StreamClaim[];
      try {
        const body: Record<string, unknown> = { worker_id: this.workerId, streams: queues, max_wait_ms: this.opts.pollWaitMs, max_tasks: n };
        if (this.opts.isolation) body.isolation = this.opts.isolation;
        const ans = await jsonCall<{ claims: StreamClaim[] }>(this.transport, this.internalUrl, "POST", "/internal/worker/claim-batch", body, {
          signal: this.claimAbort.signal,
          timeoutMs: this.opts.pollWaitMs + CLAIM_SLACK_MS,
        });
        claims = ans?.claims ?? [];
        if (claims.length > n) throw new Error(`baton: claim-batch answered ${claims.length} claims for ${n} slots`);
      } catch (e) {
        for (const s of slots) this.releaseSlot(s);
        if (this.stopping) return;
        this.claimFailures++;
        if (e instanceof ApiError && !e.transient) {
          this.log.error("claim refused", { err: e.message, status: e.status });
        } else {
          this.log.warn("claim failed", { err: (e as Error).message });
        }
        try {
          await sleep(backoff.after(e), this.claimAbort.signal);
        } catch {
          return;
        }
        continue;
      }
      this.claimFailures = 0;
      backoff.reset();
      for (const s of slots.splice(claims.length)) this.releaseSlot(s);
      const attempts = claims.map((c, i) => this.newAttempt(c, slots[i]));
      // Tell the heartbeat thread before any handler runs: a handler may block the main thread.
      this.post({ t: "start", items: attempts.map((a) => ({ slot: a.slot, gen: a.gen, taskId: a.claim.job_id, attempt: a.attempt, lease: a.claim.lease_token, everyMs: a.everyMs, leaseMs: Math.max(0, a.claim.lease_ttl_seconds || 0) * 1000 })) });
      for (const a of attempts) this.start(a);
    }
  }

  private newAttempt(c: StreamClaim, slot: number): Attempt {
    const gen = (this.gens[slot] = (this.gens[slot] % (GEN_MOD - 1)) + 1); // never 0
    Atomics.store(this.flags, slot, gen << 2);
    return new Attempt(this, c, slot, gen, this.heartbeatEvery(c));
  }

  private heartbeatEvery(c: StreamClaim): number {
    const server = (c.heartbeat_interval_seconds ?? 0) * 1000;
    const mine = this.opts.heartbeatIntervalMs ?? 0;
    if (server > 0 && mine > 0) return Math.min(server, mine);
    if (server > 0) return server;
    if (mine > 0) return mine;
    if (c.lease_ttl_seconds > 0) return (c.lease_ttl_seconds * 1000) / 3;
    return 10_000;
  }

  private start(a: Attempt): void {
    this.running.set(a.slot, a);
    const done = this.runAttempt(a)
      .catch((e) => this.log.error("attempt failed unexpectedly", { task_id: a.id, err: String(e) }))
      .finally(() => {
        this.running.delete(a.slot);
        // Generation 0 is no attempt's: the heartbeat thread stops beating the slot.
        Atomics.store(this.flags, a.slot, 0);
        this.releaseSlot(a.slot);
        const i = this.attemptsDone.indexOf(done);
        if (i >= 0) this.attemptsDone.splice(i, 1);
      });
    this.attemptsDone.push(done);
  }

  private async runAttempt(a: Attempt): Promise<void> {
    let deadline: NodeJS.Timeout | undefined;
    if (a.timeoutMs !== undefined) {
      // The execution deadline runs from when the server claimed the task.
      let startedAt = Date.now();
      const exp = a.claim.lease_expires_at ? Date.parse(a.claim.lease_expires_at) : NaN;
      if (!Number.isNaN(exp) && a.claim.lease_ttl_seconds > 0) {
        const s = exp - a.claim.lease_ttl_seconds * 1000;
        if (s < startedAt && startedAt - s < 5000) startedAt = s;
      }
      deadline = setTimeout(() => {
        a.timedOut = true;
        a.abort("timeout", `the task's timeout of ${a.timeoutMs} ms passed`);
        // Beat now, so that the server applies its timeout without waiting for its reaper.
        this.post({ t: "beat", slot: a.slot, gen: a.gen });
      }, Math.max(0, startedAt + a.timeoutMs - Date.now()));
    }
    const handler = this.handlers.get(a.name);
    type R = { ok: true; out: unknown } | { ok: false; err: unknown };
    let res: R | "gave_up";
    if (!handler) {
      res = {
        ok: false,
        err: new TaskError("CONFIGURATION", `no handler for task name ${JSON.stringify(a.name)} on worker ${this.workerId}`, { retryable: false }),
      };
    } else {
      const call = (async (): Promise<R> => {
        try {
          return { ok: true, out: await handler(a) };
        } catch (err) {
          return { ok: false, err };
        }
      })();
      res = await Promise.race([call, a.gaveUp]);
    }
    if (deadline) clearTimeout(deadline);
    // What the heartbeat thread learnt while the handler blocked the main thread.
    const v = Atomics.load(this.flags, a.slot);
    if (v >>> 2 === a.gen) {
      if (v & FLAG_CANCEL) a.cancelRequested = true;
      if (v & FLAG_LOST) a.lost = true;
    }
    await this.settle(a, res);
  }

  private async settle(a: Attempt, res: { ok: true; out: unknown } | { ok: false; err: unknown } | "gave_up"): Promise<void> {
    if (a.forced) {
      if (a.cancelRequested) await this.deliver(a, { kind: "canceled" });
      else await this.deliver(a, { kind: "failed", failure: { code: "INFRASTRUCTURE", message: "worker: shut down before the task finished", retryable: true } });
      return;
    }
    if (a.lost) {
      this.log.info("attempt lost: its outcome is not reported", { task_id: a.id, attempt: a.attempt });
      return;
    }
    if (res === "gave_up") return;
    if (a.cancelRequested) {
      await this.deliver(a, { kind: "canceled" });
      return;
    }
    if (res.ok) {
      let output: string | undefined;
      try {
        output = JSON.stringify(res.out === undefined ? null : res.out);
      } catch (e) {
        await this.deliver(a, { kind: "failed", failure: { code: "USER_CODE", message: `encode the handler's output: ${(e as Error).message}`, retryable: false } });
        return;
      }
      if (output === undefined) output = "null";
      output = a.redact(output);
      const d = await this.deliver(a, { kind: "completed", output });
      if (d.delivery === "refused") {
        await this.deliver(a, { kind: "failed", failure: { code: "USER_CODE", message: `the server refused the task's output: ${(d.err as Error).message}` } });
      }
      return;
    }
    if (a.timedOut) {
      this.log.info("task timeout passed: the server times the attempt out", { task_id: a.id, err: String(res.err) });
      return;
    }
    const f = failureOf(res.err);
    f.message = a.redact(f.message);
    if (f.stack) f.stack = a.redact(f.stack);
    if (res.err instanceof RetryAfter && res.err.seconds > 0 && !this.stopping) {
      // Keep the attempt (and its heartbeats) so the retry starts no sooner than asked.
      const wait = new AbortController();
      const r = await Promise.race([
        sleep(res.err.seconds * 1000, wait.signal).then(
          () => "slept" as const,
          () => "stop" as const,
        ),
        this.stopped.then(() => "stop" as const),
        a.gaveUp,
      ]);
      wait.abort();
      if (r === "gave_up" || a.lost) return;
    }
    await this.deliver(a, { kind: "failed", failure: f });
  }

  /** Sends an outcome until the server decides on it, retrying transient failures for as long as the worker lasts. */
  private async deliver(a: Attempt, o: Outcome): Promise<{ delivery: Delivery; err?: unknown }> {
    const backoff = new Backoff();
    for (;;) {
      try {
        await this.report(a, o);
        return { delivery: "delivered" };
      } catch (e) {
        if (e instanceof ApiError && e.gone) {
          this.log.info("attempt no longer ours: outcome not committed", { task_id: a.id, outcome: o.kind, err: e.message });
          return { delivery: "not_ours", err: e };
        }
        if (e instanceof ApiError && !e.transient) {
          this.log.error("server refused report", { task_id: a.id, outcome: o.kind, err: e.message });
          return { delivery: "refused", err: e };
        }
        if (this.reportAbort.signal.aborted) {
          this.unreported++;
          this.log.error("outcome not reported: the worker stopped", { task_id: a.id, outcome: o.kind, err: String(e) });
          return { delivery: "abandoned", err: e };
        }
        this.log.warn("report failed, retrying", { task_id: a.id, outcome: o.kind, err: (e as Error).message });
        try {
          await sleep(backoff.after(e), this.reportAbort.signal);
        } catch {
          this.unreported++;
          return { delivery: "abandoned", err: e };
        }
      }
    }
  }

  private async report(a: Attempt, o: Outcome): Promise<void> {
    const c = a.claim;
    if (o.kind === "canceled") {
      // The stream-worker dialect cannot say "cancelled": the internal dialect's task-complete can.
      await jsonCall(
        this.transport,
        this.internalUrl,
        "POST",
        INTERNAL_ROUTES.complete,
        { task_id: c.job_id, attempt: c.attempt_id, lease_token: c.lease_token, status: "Canceled" },
        { signal: this.reportAbort.signal, timeoutMs: 30_000 },
      );
      return;
    }
    const body: Record<string, unknown> = { job_id: c.job_id, attempt_id: c.attempt_id, lease_token: c.lease_token, stream: c.stream };
    if (c.message_id) body.message_id = c.message_id;
    if (o.kind === "completed") body.result = RAW(o.output);
    else body.error = o.failure;
    const r = await new Promise<{ ok: true } | { err: unknown }>((resolve) => {
      this.reportQueue.push({ type: o.kind === "completed" ? "complete" : "fail", body, resolve });
      this.scheduleReports();
    });
    if ("err" in r) throw r.err;
  }

  private scheduleReports(): void {
    if (this.reportFlushScheduled || this.reportsInflight >= REPORT_REQUESTS) return;
    this.reportFlushScheduled = true;
    // Reports that become ready in the same turn travel together.
    setImmediate(() => {
      this.reportFlushScheduled = false;
      while (this.reportsInflight < REPORT_REQUESTS && this.reportQueue.length > 0) {
        const batch = this.reportQueue.splice(0, MAX_BATCH);
        this.reportsInflight++;
        void this.sendReports(batch).finally(() => {
          this.reportsInflight--;
          if (this.reportQueue.length > 0) this.scheduleReports();
        });
      }
    });
  }

  private async sendReports(batch: ReportItem[]): Promise<void> {
    // The outputs are JSON text already: splice them in rather than parse and re-encode them.
    const parts = batch.map((it) => {
      const { result, ...rest } = it.body as { result?: RawJson };
      const head = JSON.stringify({ type: it.type, ...rest });
      return result === undefined ? head : `${head.slice(0, -1)},"result":${result.json}}`;
    });
    const raw = `{"worker_id":${JSON.stringify(this.workerId)},"reports":[${parts.join(",")}]}`;
    let results: Record<string, unknown>[];
    try {
      const ans = await this.transport.request({
        method: "POST",
        url: this.internalUrl + "/internal/worker/report-batch",
        headers: { "content-type": "application/json", accept: "application/json" },
        body: raw,
        signal: this.reportAbort.signal,
        timeoutMs: 30_000,
      });
      const text = ans.body.toString("utf8");
      if (ans.status < 200 || ans.status > 299) {
        throw apiErrorOf(ans.status, text, ans.headers["retry-after"], "POST /internal/worker/report-batch");
      }
      results = (JSON.parse(text) as { results: Record<string, unknown>[] }).results;
      if (!Array.isArray(results) || results.length !== batch.length) {
        throw new Error(`baton: report-batch answered ${Array.isArray(results) ? results.length : "no"} results for ${batch.length} reports`);
      }
    } catch (e) {
      for (const it of batch) it.resolve({ err: e });
      return;
    }
    batch.forEach((it, i) => {
      const r = results[i] ?? {};
      const status = typeof r.status === "number" ? r.status : 502;
      if (status === 200) {
        it.resolve({ ok: true });
        return;
      }
      it.resolve({
        err: new ApiError(status, typeof r.error === "string" ? r.error : String(status), typeof r.message === "string" ? r.message : "", {
          request: `report-batch ${it.type}`,
          retryAfter: typeof r.retry_after === "number" ? r.retry_after : 0,
          body: r,
        }),
      });
    });
  }
}

/** JSON text carried through a report without re-encoding. */
interface RawJson {
  json: string;
}

function RAW(json: string): RawJson {
  return { json };
}

