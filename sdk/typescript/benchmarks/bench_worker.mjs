#!/usr/bin/env node
// A no-op worker for `baton bench`: claims the tasks named $BATON_BENCH_TASK from the queue of the
// same name with $BATON_BENCH_CONCURRENCY slots and completes each with {} at once, until SIGTERM.
//
//   BATON_INTERNAL_URL=http://127.0.0.1:8081 BATON_BENCH_TASK=bench.noop BATON_BENCH_CONCURRENCY=256 \
//     node sdk/typescript/benchmarks/bench_worker.mjs
import { Worker } from "../dist/index.js";

const internalUrl = process.env.BATON_INTERNAL_URL;
const task = process.env.BATON_BENCH_TASK;
const concurrency = Number(process.env.BATON_BENCH_CONCURRENCY || "256");
if (!internalUrl || !task) {
  console.error(`bench_worker: ${!internalUrl ? "BATON_INTERNAL_URL" : "BATON_BENCH_TASK"} is not set`);
  process.exit(2);
}
if (!Number.isInteger(concurrency) || concurrency < 1) {
  console.error(`bench_worker: BATON_BENCH_CONCURRENCY ${JSON.stringify(process.env.BATON_BENCH_CONCURRENCY)} is not a positive integer`);
  process.exit(2);
}

const worker = new Worker({
  internalUrl,
  queues: [task],
  concurrency,
  // Two claim loops keep a claim in flight while the previous claim's tasks are reported.
  claimers: Number(process.env.BATON_BENCH_CLAIMERS || "1"),
  workerId: process.env.BATON_WORKER_ID || `ts-bench-${process.pid}`,
  pollWaitMs: 5000,
  transport: process.env.BATON_BENCH_TRANSPORT === "fetch" ? "fetch" : "node",
});
const out = {};
worker.handle(task, () => out);
try {
  await worker.run();
} catch (e) {
  console.error(`bench_worker: ${e?.stack ?? e}`);
  process.exit(1);
}
