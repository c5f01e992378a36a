#!/usr/bin/env node
// The TypeScript SDK's conformance program (sdk/conformance/README.md), written only with the
// SDK's public API:
//
//   node sdk/typescript/conformance/conformance.mjs worker
//   node sdk/typescript/conformance/conformance.mjs producer JOB_JSON_FILE
import { closeSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { Client, TaskError, Worker } from "../dist/index.js";

function env(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`conformance: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

function marker(kind, task) {
  const dir = env("BATON_CONFORMANCE_DIR");
  closeSync(openSync(join(dir, `${kind}-${task.key}-${task.attempt}`), "a"));
}

/** Resolves after ms, or early (true) once the signal aborts. */
function waitAbort(signal, ms) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(true);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", on);
      resolve(false);
    }, ms);
    const on = () => {
      clearTimeout(t);
      resolve(true);
    };
    signal.addEventListener("abort", on, { once: true });
  });
}

function busyLoop(seconds) {
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    // A synchronous busy loop: the main thread does nothing else meanwhile.
  }
}

async function runWorker() {
  const worker = new Worker({
    internalUrl: env("BATON_INTERNAL_URL"),
    queues: [env("BATON_CONFORMANCE_QUEUE")],
    workerId: process.env.BATON_WORKER_ID || undefined,
    concurrency: 4,
    heartbeatIntervalMs: 500,
    shutdownGraceMs: 10_000,
    blobUrl: process.env.BATON_BLOB_URL || undefined,
  });
  const started = (task) => marker("started", task);

  worker.handle("conf.add", async (task) => {
    started(task);
    let sum = task.input.n;
    for (const out of Object.values(task.parents)) sum += out.sum;
    return { sum };
  });
  worker.handle("conf.flaky", async (task) => {
    started(task);
    // TRANSIENT is not one of Baton's categories: it travels as the error's code (category USER_CODE).
    if (task.attempt === 1) throw new TaskError("USER_CODE", "flaky attempt 1", { retryable: true, code: "TRANSIENT" });
    return { attempt: task.attempt };
  });
  worker.handle("conf.fatal", async (task) => {
    started(task);
    throw new TaskError("DATA_QUALITY", "bad row", { retryable: false });
  });
  worker.handle("conf.block", (task) => {
    started(task);
    const s = task.input.seconds;
    busyLoop(s);
    return { blocked: s };
  });
  worker.handle("conf.cancel", async (task) => {
    started(task);
    if (await waitAbort(task.signal, 30_000)) {
      marker("aborted", task);
      return null;
    }
    return { cancelled: false };
  });
  worker.handle("conf.kill", async (task) => {
    started(task);
    if (task.attempt === 1) await delay(60_000);
    return { attempt: task.attempt };
  });
  worker.handle("conf.refused", async (task) => {
    started(task);
    if (task.attempt === 1) {
      await waitAbort(task.signal, 30_000);
      marker("aborted", task);
      return null;
    }
    return { attempt: task.attempt };
  });
  worker.handle("conf.term", async (task) => {
    started(task);
    await delay(1500);
    return { done: true };
  });
  worker.handle("conf.publish", async (task) => {
    started(task);
    const out = (task.pipeline?.outputs ?? []).find((o) => o.write_mode === "buffered") ?? task.pipeline?.outputs?.[0];
    if (!out) throw new TaskError("CONFIGURATION", "conf.publish: the task has no output dataset", { retryable: false });
    const rows = [
      { k: 1, v: "a" },
      { k: 2, v: "b" },
      { k: 3, v: "c" },
    ];
    await task.publishBatch(out.dataset_name || out.dataset_uuid, rows);
    return { published: rows.length };
  });
  worker.handle("conf.read", async (task) => {
    started(task);
    const input = task.pipeline?.inputs?.[0];
    if (!input) throw new TaskError("CONFIGURATION", "conf.read: the task has no dataset input", { retryable: false });
    let rows = 0;
    for await (const _ of task.rows(input, input.cursor !== undefined ? { cursor: input.cursor } : {})) rows++;
    const name = input.dataset_name || input.dataset_uuid;
    const q = await task.query(`SELECT count(*) AS n, sum(k) AS s FROM "${name}"`);
    const [n, s] = q.rows[0];
    return { rows, n: Number(n), s: Number(s) };
  });
  await worker.run();
}

async function runProducer(file) {
  if (!file) {
    console.error("usage: conformance.mjs producer JOB_JSON_FILE");
    process.exit(2);
  }
  const client = new Client({ url: env("BATON_URL"), apiKey: env("BATON_API_KEY") });
  const job = JSON.parse(readFileSync(file, "utf8"));
  const created = await client.submit(job);
  let status;
  for await (const e of client.watch(created.jobId)) {
    if (e.end) status = e.status;
  }
  const view = await client.get(created.jobId);
  process.stdout.write(JSON.stringify(view) + "\n");
  process.exit(status === "completed" && view.status === "completed" ? 0 : 1);
}

const [mode, arg] = process.argv.slice(2);
try {
  if (mode === "worker") await runWorker();
  else if (mode === "producer") await runProducer(arg);
  else {
    console.error("usage: conformance.mjs worker | producer JOB_JSON_FILE");
    process.exit(2);
  }
} catch (e) {
  console.error(`conformance: ${e?.stack ?? e}`);
  process.exit(1);
}
