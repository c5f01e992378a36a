/**
 * HTTP plumbing shared by the clients: JSON requests, Retry-After, jittered backoff, and the
 * internal listener's transport (node:http/https with keep-alive agents, which can present a
 * client certificate; or fetch).
 * @internal
 * @module
 */
import * as http from "node:http";
import * as https from "node:https";
import { readFileSync } from "node:fs";
import { ApiError } from "./errors.js";

/** The smallest retry delay, in milliseconds. */
export const MIN_BACKOFF_MS = 100;
/** The largest retry delay (without a longer Retry-After), in milliseconds. */
export const MAX_BACKOFF_MS = 10_000;
/** The longest a Retry-After makes a retry wait. */
export const MAX_RETRY_AFTER_MS = 60_000;

/** Seconds a `Retry-After` header value asks for (delta-seconds or an HTTP date); 0 when none. */
export function parseRetryAfter(v: string | null | undefined): number {
  if (!v) return 0;
  const t = v.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t);
  const at = Date.parse(t);
  if (Number.isNaN(at)) return 0;
  return Math.max(0, (at - Date.now()) / 1000);
}

/** Exponential backoff from {@link MIN_BACKOFF_MS} doubling to {@link MAX_BACKOFF_MS}, ±50% jitter. */
export class Backoff {
  private n = 0;
  constructor(private readonly minMs = MIN_BACKOFF_MS, private readonly maxMs = MAX_BACKOFF_MS) {}

  /** The next delay, in milliseconds. */
  next(): number {
    const d = Math.min(this.maxMs, this.minMs * 2 ** Math.min(this.n, 20));
    this.n++;
    return d * (0.5 + Math.random());
  }

  /** The delay after `err`: the next backoff, or longer when the server's Retry-After asked for it. */
  after(err: unknown): number {
    let d = this.next();
    if (err instanceof ApiError && err.retryAfter * 1000 > d) d = Math.min(err.retryAfter * 1000, MAX_RETRY_AFTER_MS);
    return d;
  }

  reset(): void {
    this.n = 0;
  }
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Whether an error is worth retrying: no answer at all, or a 5xx, 408 or 429. */
export function isTransient(err: unknown): boolean {
  if (err instanceof ApiError) return err.transient;
  return true;
}

/** The code of an answer whose body has none, by status. */
const STATUS_CODES: Record<number, string> = {
  400: "invalid_request",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  408: "request_timeout",
  409: "conflict",
  410: "gone",
  413: "payload_too_large",
  422: "unprocessable",
  429: "rate_limited",
  500: "internal_error",
  501: "not_implemented",
  502: "bad_gateway",
  503: "unavailable",
  504: "gateway_timeout",
};

/** Builds the ApiError of a non-2xx answer. */
export function apiErrorOf(status: number, text: string, retryAfter: string | null | undefined, request: string): ApiError {
  let body: unknown;
  let code = "";
  let message = "";
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (body && typeof body === "object" && !Array.isArray(body)) {
    const b = body as Record<string, unknown>;
    const e = b.error;
    const m = b.message;
    if (typeof m === "string") message = m;
    if (typeof e === "string") {
      if (message || /^[a-z][a-z0-9_]*$/.test(e)) code = e;
      // The producer API's errors are one human text in `error`: the code comes from the status.
      else message = e;
    } else if (e !== undefined && e !== null) code = JSON.stringify(e);
  } else {
    message = text.trim().slice(0, 200);
  }
  return new ApiError(status, code || STATUS_CODES[status] || `http_${status}`, message || code || `HTTP ${status}`, {
    request,
    retryAfter: parseRetryAfter(retryAfter),
    body,
  });
}

/** One answer of a {@link Transport}. */
export interface TransportAnswer {
  status: number;
  /** Lower-case header names. */
  headers: Record<string, string>;
  body: Buffer;
}

/** One request of a {@link Transport}. */
export interface TransportRequest {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  signal?: AbortSignal;
  /** Aborts the request after this many milliseconds. */
  timeoutMs?: number;
}

/** How the worker talks to the internal listener. */
export interface Transport {
  request(r: TransportRequest): Promise<TransportAnswer>;
  /** Closes idle connections. */
  close(): void;
}

/** TLS material for the internal listener: PEM text or file paths. */
export interface TlsOptions {
  /** The CA that signed the server's certificate (PEM text, or the path of a PEM file). */
  ca?: string | Buffer;
  /** The client certificate (PEM text or a path). */
  cert?: string | Buffer;
  /** The client certificate's private key (PEM text or a path). */
  key?: string | Buffer;
  /** Checks the server's name against its certificate (default true). */
  rejectUnauthorized?: boolean;
}

/** Reads a PEM given as text or as a path. */
export function pem(v: string | Buffer | undefined, what: string): Buffer | undefined {
  if (v === undefined || v === "") return undefined;
  if (Buffer.isBuffer(v)) return v;
  if (v.includes("-----BEGIN")) return Buffer.from(v);
  try {
    return readFileSync(v);
  } catch (e) {
    throw new Error(`baton: ${what}: cannot read ${v}: ${(e as Error).message}`);
  }
}

/** A transport over node:http/node:https with keep-alive agents (and a client certificate). */
export function nodeTransport(opts: { maxSockets?: number; tls?: TlsOptions } = {}): Transport {
  const maxSockets = opts.maxSockets ?? 64;
  const httpAgent = new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, scheduling: "lifo" });
  const tls = opts.tls ?? {};
  const httpsAgent = new https.Agent({
    keepAlive: true,
    maxSockets,
    maxFreeSockets: maxSockets,
    scheduling: "lifo",
    ca: pem(tls.ca, "CA"),
    cert: pem(tls.cert, "client certificate"),
    key: pem(tls.key, "client key"),
    rejectUnauthorized: tls.rejectUnauthorized ?? true,
  });
  return {
    request(r: TransportRequest): Promise<TransportAnswer> {
      return new Promise((resolve, reject) => {
        let u: URL;
        try {
          u = new URL(r.url);
        } catch {
          return reject(new TypeError(`baton: invalid URL ${r.url}`));
        }
        const secure = u.protocol === "https:";
        const mod = secure ? https : http;
        const headers: Record<string, string | number> = { ...(r.headers ?? {}) };
        if (r.body !== undefined) headers["content-length"] = Buffer.byteLength(r.body);
        if (r.signal?.aborted) return reject(r.signal.reason);
        const req = mod.request(
          {
            method: r.method,
            protocol: u.protocol,
            hostname: u.hostname.replace(/^\[|\]$/g, ""),
            port: u.port || (secure ? 443 : 80),
            path: u.pathname + u.search,
            headers,
            agent: secure ? httpsAgent : httpAgent,
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => {
              cleanup();
              const h: Record<string, string> = {};
              for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h[k] = Array.isArray(v) ? v.join(", ") : v;
              resolve({ status: res.statusCode ?? 0, headers: h, body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks) });
            });
            res.on("error", (e) => {
              cleanup();
              reject(e);
            });
          },
        );
        let timer: NodeJS.Timeout | undefined;
        const onAbort = () => req.destroy(r.signal!.reason instanceof Error ? r.signal!.reason : new Error("aborted"));
        const cleanup = () => {
          if (timer) clearTimeout(timer);
          r.signal?.removeEventListener("abort", onAbort);
        };
        if (r.timeoutMs && r.timeoutMs > 0) {
          timer = setTimeout(() => req.destroy(new Error(`baton: ${r.method} ${u.pathname}: no answer within ${r.timeoutMs} ms`)), r.timeoutMs);
        }
        r.signal?.addEventListener("abort", onAbort, { once: true });
        req.on("error", (e) => {
          cleanup();
          reject(e);
        });
        if (r.body !== undefined) req.end(r.body);
        else req.end();
      });
    },
    close() {
      httpAgent.destroy();
      httpsAgent.destroy();
    },
  };
}

/** A transport over the global fetch (no client certificates). */
export function fetchTransport(): Transport {
  return {
    async request(r: TransportRequest): Promise<TransportAnswer> {
      const signals: AbortSignal[] = [];
      if (r.signal) signals.push(r.signal);
      if (r.timeoutMs && r.timeoutMs > 0) signals.push(AbortSignal.timeout(r.timeoutMs));
      const signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
      const res = await fetch(r.url, { method: r.method, headers: r.headers, body: r.body, signal });
      const body = Buffer.from(await res.arrayBuffer());
      const h: Record<string, string> = {};
      res.headers.forEach((v, k) => (h[k] = v));
      return { status: res.status, headers: h, body };
    },
    close() {},
  };
}

/** Sends `body` as JSON with `t` and decodes a 2xx answer; a non-2xx answer throws an ApiError. */
export async function jsonCall<T>(
  t: Transport,
  base: string,
  method: string,
  path: string,
  body: unknown,
  opts: { headers?: Record<string, string>; signal?: AbortSignal; timeoutMs?: number } = {},
): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json", ...(opts.headers ?? {}) };
  let raw: string | undefined;
  if (body !== undefined) {
    raw = JSON.stringify(body);
    headers["content-type"] = "application/json";
  }
  let ans: TransportAnswer;
  try {
    ans = await t.request({ method, url: base + path, headers, body: raw, signal: opts.signal, timeoutMs: opts.timeoutMs });
  } catch (e) {
    if (opts.signal?.aborted) throw opts.signal.reason;
    throw new Error(`baton: ${method} ${path}: ${(e as Error).message}`, { cause: e });
  }
  const text = ans.body.toString("utf8");
  if (ans.status < 200 || ans.status > 299) throw apiErrorOf(ans.status, text, ans.headers["retry-after"], `${method} ${path}`);
  if (!text) return undefined as T;
  try {
    return JSON.parse(text) as T;
  } catch (e) {
    throw new Error(`baton: ${method} ${path}: the answer is not JSON: ${text.slice(0, 200)}`);
  }
}

/** The base URL without a trailing slash, checked to be http(s). */
export function baseUrl(u: string, what: string): string {
  let parsed: URL;
  try {
    parsed = new URL(u);
  } catch {
    throw new TypeError(`baton: ${what} ${JSON.stringify(u)}: want http(s)://host[:port]`);
  }
  if ((parsed.protocol !== "http:" && parsed.protocol !== "https:") || !parsed.host) {
    throw new TypeError(`baton: ${what} ${JSON.stringify(u)}: want http(s)://host[:port]`);
  }
  return u.replace(/\/+$/, "");
}
