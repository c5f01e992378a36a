#!/usr/bin/env node
// A producer: submits the job document read from a file (or "-" for stdin), follows the job over
// Server-Sent Events to its end, and prints the final job view as one JSON line.
//
//   BATON_URL=http://127.0.0.1:8080 BATON_API_KEY=... node producer.mjs job.json [--idempotency-key KEY]
//
// Exit status: 0 when the job completed, 1 otherwise.
import { readFileSync } from "node:fs";
import { Client } from "../../sdk/typescript/dist/index.js";

const args = process.argv.slice(2);
const file = args[0];
const keyAt = args.indexOf("--idempotency-key");
const idempotencyKey = keyAt >= 0 ? args[keyAt + 1] : undefined;
if (!file || (keyAt >= 0 && !idempotencyKey)) {
  console.error("usage: producer.mjs JOB_JSON_FILE|- [--idempotency-key KEY]");
  process.exit(2);
}
const client = new Client({ url: process.env.BATON_URL ?? "http://127.0.0.1:8080", apiKey: process.env.BATON_API_KEY ?? "" });
const job = JSON.parse(readFileSync(file === "-" ? 0 : file, "utf8"));
const created = await client.submit(job, { idempotencyKey });
console.error(`submitted ${created.jobId} (${created.totalTasks} tasks)`);
for await (const e of client.watch(created.jobId)) {
  if (e.end) console.error(`job ${e.status}`);
  else console.error(`${e.type}${e.taskId ? " " + e.taskId : ""}`);
}
const view = await client.get(created.jobId);
console.log(JSON.stringify(view));
process.exit(view.status === "completed" ? 0 : 1);
