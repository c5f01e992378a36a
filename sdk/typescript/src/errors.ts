/**
 * Errors of the SDK: {@link ApiError} for a refusal of the server, and the failure classes a
 * handler throws to say what kind of failure it is and whether Baton should retry it.
 * @module
 */

/**
 * The error categories of Baton's retry rule (docs/lifecycle.md). `USER_CODE`, `INFRASTRUCTURE`
 * and `TIMEOUT` are retried by default; `DATA_QUALITY`, `CONFIGURATION` and `CANCELLED` are not.
 */
export type Category = "USER_CODE" | "DATA_QUALITY" | "INFRASTRUCTURE" | "CONFIGURATION" | "TIMEOUT" | "CANCELLED";

/** Every category, in the contracts' order. */
export const CATEGORIES: readonly Category[] = Object.freeze([
  "USER_CODE",
  "DATA_QUALITY",
  "INFRASTRUCTURE",
  "CONFIGURATION",
  "TIMEOUT",
  "CANCELLED",
]);

/** Whether the server retries a failure of category `c` when the failure does not say. */
export function retryableByDefault(c: Category): boolean {
  return c === "USER_CODE" || c === "INFRASTRUCTURE" || c === "TIMEOUT";
}

/** Whether `s` is one of the {@link CATEGORIES}. */
export function isCategory(s: unknown): s is Category {
  return typeof s === "string" && (CATEGORIES as readonly string[]).includes(s);
}

/** A non-2xx answer of the server (or an answer the SDK could not read). */
export class ApiError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The refusal's code (`invalid_request`, `lease_mismatch`, ...), or the producer API's error text. */
  readonly code: string;
  /** The method and path of the request. */
  readonly request: string;
  /** Seconds the answer's `Retry-After` asked to wait, or 0. */
  readonly retryAfter: number;
  /** The answer's JSON body when it had one. */
  readonly body: unknown;

  constructor(status: number, code: string, message: string, opts: { request?: string; retryAfter?: number; body?: unknown } = {}) {
    super(message || code || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.request = opts.request ?? "";
    this.retryAfter = opts.retryAfter ?? 0;
    this.body = opts.body;
  }

  /** A 409, 410 or 404 about an attempt: the attempt is no longer this worker's. */
  get gone(): boolean {
    return this.status === 409 || this.status === 410 || this.status === 404;
  }

  /** Worth retrying: a 5xx, 408 or 429. */
  get transient(): boolean {
    return this.status >= 500 || this.status === 408 || this.status === 429;
  }

  override toString(): string {
    return `ApiError: ${this.request ? this.request + ": " : ""}${this.status} ${this.code}: ${this.message}`;
  }
}

/** Options of a {@link TaskError}. */
export interface TaskErrorOptions {
  /** Overrides the category's default: `true` retry, `false` fail for good. */
  retryable?: boolean;
  /** The error this one wraps. */
  cause?: unknown;
  /**
   * A code of your own kept with the error (the stream-worker dialect's free-form `error.code`,
   * e.g. `TRANSIENT`); the failure's category is then `USER_CODE`, so only that category takes one.
   */
  code?: string;
}

/**
 * A handler failure with its category and, optionally, whether to retry it:
 * `throw new TaskError("DATA_QUALITY", "row 3 has no id")`.
 */
export class TaskError extends Error {
  /** The failure's category. */
  readonly category: Category;
  /** `undefined`: the category's default. */
  readonly retryable: boolean | undefined;
  /** A code of your own (see {@link TaskErrorOptions.code}). */
  readonly code: string | undefined;

  constructor(category: Category, message: string, opts: TaskErrorOptions = {}) {
    if (!isCategory(category)) {
      throw new TypeError(`TaskError: category ${JSON.stringify(category)} is not one of ${CATEGORIES.join(", ")}`);
    }
    if (opts.code !== undefined && (typeof opts.code !== "string" || opts.code === "" || isCategory(opts.code) || category !== "USER_CODE")) {
      throw new TypeError("TaskError: a code must be a non-empty string other than a category, with category USER_CODE");
    }
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "TaskError";
    this.category = category;
    this.retryable = opts.retryable;
    this.code = opts.code;
  }

  /** Whether the server will retry this failure (attempts permitting). */
  get willRetry(): boolean {
    return this.retryable ?? retryableByDefault(this.category);
  }
}

/** A failure not to retry: `USER_CODE` unless another category is given. */
export class NonRetryable extends TaskError {
  constructor(message: string, opts: { category?: Category; cause?: unknown } = {}) {
    super(opts.category ?? "USER_CODE", message, { retryable: false, cause: opts.cause });
    this.name = "NonRetryable";
  }
}

/**
 * A retryable failure whose next attempt should not start before `seconds` from now. Baton's
 * contracts have no per-failure delay, so a {@link Worker} keeps the attempt (heartbeating it) for
 * `seconds` before it reports the failure: the retry starts at least that late, plus the task's
 * own backoff. A shutdown reports it at once. Category `USER_CODE` unless another is given.
 */
export class RetryAfter extends TaskError {
  /** The delay asked for, in seconds. */
  readonly seconds: number;

  constructor(seconds: number, message = "", opts: { category?: Category; cause?: unknown } = {}) {
    if (!Number.isFinite(seconds) || seconds < 0) throw new TypeError(`RetryAfter: seconds must be a non-negative number, got ${seconds}`);
    super(opts.category ?? "USER_CODE", message || `retry after ${seconds}s`, { retryable: true, cause: opts.cause });
    this.name = "RetryAfter";
    this.seconds = seconds;
  }
}

/** Why a task's `signal` was aborted; its `reason` is an {@link AbortError} with one of these kinds. */
export type AbortKind = "cancel" | "lease_lost" | "timeout" | "shutdown";

/** The reason of an aborted task signal. */
export class AbortError extends Error {
  /** What happened. */
  readonly kind: AbortKind;
  constructor(kind: AbortKind, message: string) {
    super(message);
    this.name = "AbortError";
    this.kind = kind;
  }
}
