#!/usr/bin/env node
// Measures a worker's throughput by hand: submits N no-op tasks (jobs of 1000 tasks named and
// queued as TASK), then polls the server until every job completed, and prints tasks/s of the
// drain (from the first task started to the last completed, as the server's events record it).
//
//   BATON_URL=... BATON_API_KEY=... node drain.mjs TASK N        (then start the worker)
import { Client } from "../dist/index.js";

const [task, nArg, mode] = process.argv.slice(2);
const n = Number(nArg || "20000");
if (!task || !Number.isInteger(n) || n < 1) {
  console.error("usage: drain.mjs TASK N");
  process.exit(2);
}
const client = new Client({ url: process.env.BATON_URL, apiKey: process.env.BATON_API_KEY });
const jobs = [];
for (let done = 0; done < n; ) {
  const size = Math.min(1000, n - done);
  const tasks = [];
  for (let i = 0; i < size; i++) tasks.push({ taskId: `t${i}`, name: task, queue: task });
  jobs.push((await client.submit({ name: `${task}-${done}`, tasks })).jobId);
  done += size;
}
console.error(`submitted ${n} tasks in ${jobs.length} jobs; waiting for them to complete`);
let first = Infinity;
let last = 0;
for (const id of jobs) {
  for (;;) {
    const j = await client.get(id);
    if (j.status !== "processing") {
      if (j.status !== "completed") throw new Error(`job ${id} ended ${j.status}`);
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
for (const id of jobs) {
  const page = await client.events(id, { limit: 1000 });
  let after = 0;
  let events = page.events;
  for (;;) {
    for (const e of events) {
      if (e.type === "Task Processing Started") first = Math.min(first, e.at);
      if (e.type === "Task Completed") last = Math.max(last, e.at);
    }
    if (events.length < 1000) break;
    after = events[events.length - 1].id;
    events = (await client.events(id, { after, limit: 1000 })).events;
  }
}
const secs = (last - first) / 1000;
console.log(JSON.stringify({ tasks: n, seconds: secs, tasks_per_second: Math.round(n / secs) }));
