/**
 * Push targets: checking that a delivery comes from Baton (docs/contracts/push.md), reporting
 * through the callback dialect (docs/contracts/callback.md), and a `node:http` request handler
 * that runs a {@link Handler} for each delivery.
 * @module
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { AbortError, ApiError, isCategory } from "./errors.js";
import { Backoff, baseUrl, fetchTransport, jsonCall, sleep, type Transport } from "./http.js";
import { AttemptCalls, CallingTask, SCOPED_ROUTES, type Task } from "./task.js";
import { failureOf, type Handler } from "./worker.js";
import type {
  CallbackCompletedAnswer,
  CallbackHeartbeatAnswer,
  JsonValue,
  TaskEnvelope,
} from "./wire.js";

/** Baton's own tolerance for a delivery's timestamp, in seconds. */
export const PUSH_TOLERANCE_SECONDS = 300;

/** Why {@link checkPush} refused a delivery. */
export class PushUnauthorizedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PushUnauthorizedError";
  }
}

type HeaderBag = Headers | Record<string, string | string[] | undefined> | IncomingMessage["headers"];

function header(h: HeaderBag, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  const want = name.toLowerCase();
  for (const [k, v] of Object.entries(h as Record<string, string | string[] | undefined>)) {
    if (k.toLowerCase() === want) return Array.isArray(v) ? v[0] ?? "" : v ?? "";
  }
  return "";
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  // Compare in constant time; unequal lengths compare against themselves and fail.
  if (x.length !== y.length) {
    timingSafeEqual(x, x);
    return false;
  }
  return timingSafeEqual(x, y);
}

/**
 * Checks a delivery's `Authorization: Bearer <secret>`, its `Baton-Timestamp` (within
 * `toleranceSeconds` of now, either way) and its `Baton-Signature` (`v1=` + HMAC-SHA256 of
 * `<timestamp>.<raw body>`), all in constant time; throws a {@link PushUnauthorizedError} saying
 * what is wrong.
 */
export function checkPush(
  headers: HeaderBag,
  body: Uint8Array | string,
  secret: string,
  opts: { toleranceSeconds?: number; now?: number } = {},
): void {
  if (typeof secret !== "string" || secret === "") throw new TypeError("baton: checkPush needs the target's secret");
  const raw = typeof body === "string" ? Buffer.from(body) : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (!sameText(header(headers, "authorization"), "Bearer " + secret)) throw new PushUnauthorizedError("missing or wrong bearer secret");
  const ts = header(headers, "baton-timestamp");
  if (!/^\d{1,15}$/.test(ts)) throw new PushUnauthorizedError("Baton-Timestamp is missing or not decimal Unix seconds");
  const now = opts.now ?? Date.now() / 1000;
  const tolerance = opts.toleranceSeconds ?? PUSH_TOLERANCE_SECONDS;
  if (Math.abs(now - Number(ts)) > tolerance) throw new PushUnauthorizedError(`Baton-Timestamp is more than ${tolerance}s from this clock`);
  const sig = header(headers, "baton-signature");
  if (!/^v1=[0-9a-f]{64}$/.test(sig)) throw new PushUnauthorizedError("Baton-Signature is missing or not v1=<64 lowercase hex digits>");
  const mac = createHmac("sha256", secret).update(ts + ".").update(raw).digest("hex");
  if (!sameText(sig, "v1=" + mac)) throw new PushUnauthorizedError("Baton-Signature does not match the body");
}

/** Whether a delivery carries Baton's signature for `secret` (see {@link checkPush}). */
export function verifyPush(headers: HeaderBag, body: Uint8Array | string, secret: string, opts: { toleranceSeconds?: number; now?: number } = {}): boolean {
  try {
    checkPush(headers, body, secret, opts);
    return true;
  } catch (e) {
    if (e instanceof PushUnauthorizedError) return false;
    throw e;
  }
}

/** Signs a body as Baton does (for tests of a target): the three headers of a delivery. */
export function signPush(body: Uint8Array | string, secret: string, timestamp = Math.floor(Date.now() / 1000)): Record<string, string> {
  const ts = String(timestamp);
  const mac = createHmac("sha256", secret).update(ts + ".").update(body).digest("hex");
  return { authorization: "Bearer " + secret, "baton-timestamp": ts, "baton-signature": "v1=" + mac };
}

/** Reports an envelope's attempt through the callback dialect (`/v1/tasks/{taskId}/...`). */
export class CallbackReporter {
  private token: string;
  private readonly base: string;

  constructor(
    readonly envelope: TaskEnvelope,
    private readonly workerId: string,
    private readonly transport: Transport = fetchTransport(),
  ) {
    if (!envelope || typeof envelope.taskId !== "string" || typeof envelope.taskToken !== "string") throw new TypeError("baton: CallbackReporter needs a push envelope");
    if (typeof workerId !== "string" || workerId === "") throw new TypeError("baton: CallbackReporter needs a worker id");
    this.base = baseUrl(envelope.callbackBaseUrl, "callbackBaseUrl");
    this.token = envelope.taskToken;
  }

  /** The newest task token. */
  get taskToken(): string {
    return this.token;
  }

  private async call<T>(what: string, extra: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    const e = this.envelope;
    const body = { attempt: e.attempt, attemptId: e.attemptId, workerId: this.workerId, ...extra };
    const backoff = new Backoff();
    for (let tries = 0; ; tries++) {
      try {
        return await jsonCall<T>(this.transport, this.base, "POST", `/v1/tasks/${encodeURIComponent(e.taskId)}/${what}`, body, {
          headers: { authorization: "Bearer " + this.token },
          signal,
          timeoutMs: 30_000,
        });
      } catch (err) {
        // Every callback is idempotent: retry what decided nothing.
        const transient = err instanceof ApiError ? err.transient : !signal?.aborted;
        if (!transient || tries >= 8) throw err;
        await sleep(backoff.after(err), signal);
      }
    }
  }

  /** `POST .../started`: throws a 409 ApiError when the task was cancelled before it started. */
  started(signal?: AbortSignal): Promise<unknown> {
    return this.call("started", { startedAt: new Date().toISOString().replace(/\.\d{3}Z$/, "Z") }, signal);
  }

  /** `POST .../heartbeat`: extends the lease; a fresh token in the answer replaces the reporter's. */
  async heartbeat(opts: { progressPct?: number; message?: string; signal?: AbortSignal } = {}): Promise<CallbackHeartbeatAnswer> {
    const extra: Record<string, unknown> = {};
    if (opts.progressPct !== undefined) extra.progressPct = opts.progressPct;
    if (opts.message !== undefined) extra.message = opts.message;
    const ans = await this.call<CallbackHeartbeatAnswer>("heartbeat", extra, opts.signal);
    if (ans?.taskToken) this.token = ans.taskToken;
    return ans;
  }

  /** `POST .../completed` with `SUCCEEDED` and the output. */
  succeeded(output: unknown, signal?: AbortSignal): Promise<CallbackCompletedAnswer> {
    return this.call("completed", { outcome: "SUCCEEDED", output: output === undefined ? null : output }, signal);
  }

  /** `POST .../completed` with `FAILED`; `err` may be a {@link TaskError}. */
  failed(err: unknown, signal?: AbortSignal): Promise<CallbackCompletedAnswer> {
    const f = failureOf(err);
    const error = { category: isCategory(f.code) ? f.code : "USER_CODE", message: f.message, stackTrace: f.stack, retryable: f.retryable };
    return this.call("completed", { outcome: "FAILED", error }, signal);
  }

  /** `POST .../completed` with `CANCELLED`. */
  cancelled(signal?: AbortSignal): Promise<CallbackCompletedAnswer> {
    return this.call("completed", { outcome: "CANCELLED" }, signal);
  }
}

/** Options of {@link pushHandler}. */
export interface PushHandlerOptions {
  /** The target's secret (`--push-secret NAME=SECRET`); unset: deliveries are not checked (not for production). */
  secret?: string;
  /** Sent as `workerId` in callbacks (default `push-<pid>`). */
  workerId?: string;
  /** Timestamp tolerance in seconds (default 300). */
  toleranceSeconds?: number;
  /** Largest body accepted, in bytes (default 4 MiB). */
  maxBodyBytes?: number;
  /** How long a handler may take to return after its lease was lost before it is forgotten (default 5000). */
  abortGraceMs?: number;
  /** Called with each error a delivery's run ends with (default: printed on stderr). */
  onError?: (err: unknown, envelope?: TaskEnvelope) => void;
}

/** A push target's task: the {@link Task} of a delivered envelope. */
class PushTask extends CallingTask {
  readonly controller = new AbortController();
  readonly signal = this.controller.signal;
  cancelRequested = false;
  lost = false;
  readonly calls: AttemptCalls;

  constructor(
    readonly env: TaskEnvelope,
    readonly reporter: CallbackReporter,
    private readonly beatNow: () => void,
  ) {
    const dl = env.deadline ? Date.parse(env.deadline) : NaN;
    super({
      id: env.taskId,
      jobId: env.runId,
      key: env.taskKey,
      name: env.taskName,
      attempt: env.attempt,
      input: env.input,
      parents: (env.dependencyOutputs ?? {}) as Record<string, JsonValue>,
      timeoutMs: Number.isNaN(dl) ? undefined : Math.max(0, dl - Date.now()),
      traceparent: env.traceparent,
      pipeline: env.job
        ? { job: env.job, operator: env.operator ?? env.taskName, inputs: env.inputs ?? [], outputs: env.outputs ?? [], trigger: env.trigger }
        : undefined,
    });
    this.calls = new AttemptCalls(
      fetchTransport(),
      baseUrl(env.callbackBaseUrl, "callbackBaseUrl"),
      SCOPED_ROUTES,
      { taskId: env.taskId, attempt: env.attempt, lease: env.leaseToken },
      () => this.reporter.taskToken,
      process.env.BATON_BLOB_URL || undefined,
    );
  }

  get capabilityToken(): string {
    return this.reporter.taskToken;
  }
  shouldCancel(): boolean {
    return this.cancelRequested || this.lost;
  }
  async heartbeat(): Promise<void> {
    this.beatNow();
  }
  async secrets(): Promise<Record<string, string>> {
    if (this.pipeline?.job.secrets?.length) throw new Error("baton: a push target gets no secrets from Baton: its own environment holds them");
    return {};
  }
  async secret(name: string): Promise<string> {
    throw new Error(`baton: the task has no secret ${JSON.stringify(name)}: a push target reads secrets from its own environment`);
  }
}

/**
 * A `node:http` request handler that is a push target: it checks each delivery's signature
 * (with `secret`), answers 202 at once (401 to a refusal, 400 to a body that is not an
 * envelope), deduplicates deliveries on `Idempotency-Key`, then runs `handler` with the
 * envelope's task: `started`, heartbeats every `heartbeatIntervalMs` (cancellation and a lost
 * lease abort `task.signal`), and `completed` with the outcome, through the callback dialect.
 *
 * ```ts
 * http.createServer(pushHandler(async (task) => ({ ok: true }), { secret: process.env.PUSH_SECRET })).listen(8090);
 * ```
 */
export function pushHandler(handler: Handler, opts: PushHandlerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  if (typeof handler !== "function") throw new TypeError("baton: pushHandler needs a handler function");
  const workerId = opts.workerId ?? `push-${process.pid}`;
  const maxBody = opts.maxBodyBytes ?? 4 << 20;
  const seen = new Map<string, number>();
  const onError = opts.onError ?? ((err: unknown) => console.error("baton push target:", err));
  const answer = (res: ServerResponse, status: number, body: unknown, extra: Record<string, string> = {}) => {
    res.writeHead(status, { "content-type": "application/json", ...extra }).end(JSON.stringify(body) + "\n");
  };
  return (req, res) => {
    if (req.method !== "POST") {
      answer(res, 405, { error: `method ${req.method} is not allowed; allowed: POST` }, { allow: "POST" });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > maxBody) tooLarge = true;
      else chunks.push(c);
    });
    req.on("end", () => {
      if (tooLarge) return answer(res, 413, { error: `request body too large: the limit is ${maxBody} bytes` });
      const body = Buffer.concat(chunks);
      if (opts.secret !== undefined) {
        try {
          checkPush(req.headers, body, opts.secret, { toleranceSeconds: opts.toleranceSeconds });
        } catch (e) {
          if (e instanceof PushUnauthorizedError) return answer(res, 401, { error: e.message }, { "www-authenticate": 'Bearer realm="baton-push"' });
          throw e;
        }
      }
      let env: TaskEnvelope;
      try {
        env = JSON.parse(body.toString("utf8")) as TaskEnvelope;
        if (!env || typeof env.taskId !== "string" || typeof env.taskToken !== "string" || typeof env.callbackBaseUrl !== "string" || !Number.isInteger(env.attempt)) {
          throw new Error("not a push envelope: taskId, attempt, taskToken and callbackBaseUrl are required");
        }
      } catch (e) {
        return answer(res, 400, { error: `the body is not a Baton task envelope: ${(e as Error).message}` });
      }
      const key = header(req.headers, "idempotency-key") || env.idempotencyKey || `${env.runId}/${env.taskId}/${env.attempt}`;
      const now = Date.now();
      for (const [k, at] of seen) if (now - at > 3_600_000) seen.delete(k);
      if (seen.has(key)) return answer(res, 202, { accepted: true, duplicate: true });
      seen.set(key, now);
      answer(res, 202, { accepted: true });
      runPushed(env, handler, workerId, opts.abortGraceMs ?? 5_000).catch((e) => onError(e, env));
    });
    req.on("error", (e) => onError(e));
  };
}

/** Runs one delivered attempt: started, heartbeats, the handler, completed. */
export async function runPushed(env: TaskEnvelope, handler: Handler, workerId: string, abortGraceMs = 5_000): Promise<void> {
  const reporter = new CallbackReporter(env, workerId);
  try {
    await reporter.started();
  } catch (e) {
    if (e instanceof ApiError && e.gone) return; // cancelled before it started, or no longer ours
    throw e;
  }
  let beatTimer: NodeJS.Timeout | undefined;
  let stopped = false;
  let giveUp!: () => void;
  const gaveUp = new Promise<"gave_up">((r) => (giveUp = () => r("gave_up")));
  const task: PushTask = new PushTask(env, reporter, () => void beat());
  const every = Math.max(200, env.heartbeatIntervalMs || 10_000);
  const beat = async (): Promise<void> => {
    if (stopped) return;
    try {
      const ans = await reporter.heartbeat();
      if (ans?.shouldCancel && !task.cancelRequested) {
        task.cancelRequested = true;
        task.controller.abort(new AbortError("cancel", `cancellation requested: ${ans.cancelReason ?? "user_requested"}`));
      }
    } catch (e) {
      if (e instanceof ApiError && !e.transient) {
        task.lost = true;
        stopped = true;
        task.controller.abort(new AbortError("lease_lost", `the lease was lost: ${e.message}`));
        setTimeout(giveUp, abortGraceMs).unref();
        return;
      }
    }
    if (!stopped) {
      if (beatTimer) clearTimeout(beatTimer);
      beatTimer = setTimeout(() => void beat(), every);
    }
  };
  beatTimer = setTimeout(() => void beat(), every);
  let res: { ok: true; out: unknown } | { ok: false; err: unknown } | "gave_up";
  try {
    const call = (async () => {
      try {
        return { ok: true as const, out: await handler(task) };
      } catch (err) {
        return { ok: false as const, err };
      }
    })();
    res = await Promise.race([call, gaveUp]);
  } finally {
    stopped = true;
    if (beatTimer) clearTimeout(beatTimer);
  }
  if (task.lost || res === "gave_up") return;
  try {
    if (task.cancelRequested) await reporter.cancelled();
    else if (res.ok) await reporter.succeeded(res.out);
    else await reporter.failed(res.err);
  } catch (e) {
    if (e instanceof ApiError && e.gone) return;
    throw e;
  }
}
