/**
 * Baton's TypeScript SDK: a producer {@link Client}, a {@link Worker}, the task-scoped
 * {@link TaskScope} for untrusted code, push target helpers ({@link verifyPush},
 * {@link pushHandler}, {@link CallbackReporter}) and {@link runLocal} for tests.
 * @packageDocumentation
 */
export { Client, PipelinesApi, DatasetsApi, BundlesApi, parseSSE } from "./client.js";
export type { ClientOptions, CallOptions, SubmitOptions, ListOptions, WatchOptions, WatchEnd, RowsOptions, QueryOptions, SSEMessage } from "./client.js";
export { ApiError, TaskError, NonRetryable, RetryAfter, AbortError, CATEGORIES, retryableByDefault, isCategory } from "./errors.js";
export type { Category, TaskErrorOptions, AbortKind } from "./errors.js";
export { Worker, failureOf } from "./worker.js";
export type { WorkerOptions, Handler, Logger } from "./worker.js";
export { TaskScope } from "./scope.js";
export type { TaskScopeOptions, Completion } from "./scope.js";
export { CAPABILITY_HEADER, bufferPrefix, toJsonl, tokenClaims } from "./task.js";
export type { Task, PipelineTask, PublishedBatch, TaskRowsOptions, TaskCallOptions } from "./task.js";
export { verifyPush, checkPush, signPush, pushHandler, runPushed, CallbackReporter, PushUnauthorizedError, PUSH_TOLERANCE_SECONDS } from "./push.js";
export type { PushHandlerOptions } from "./push.js";
export { runLocal } from "./local.js";
export type { RunLocalOptions, LocalResult } from "./local.js";
export { signV4, putS3Object, amzDate } from "./blob.js";
export type { StorageCredentials, SignRequest } from "./blob.js";
export { nodeTransport, fetchTransport, parseRetryAfter } from "./http.js";
export type { TlsOptions, Transport, TransportRequest, TransportAnswer } from "./http.js";
export type * from "./wire.js";
