#!/usr/bin/env node
// A worker: claims the tasks named TASK (from the queue of the same name) on the internal
// listener and completes each with {by, task, total, parents}: its input's n plus its parents'
// totals. An input {"sleep": s} makes the handler block its thread for s seconds (the heartbeat
// thread keeps the lease alive meanwhile); {"fail": CATEGORY} fails the task with that category.
// It stops on SIGTERM or SIGINT, letting running tasks finish. With BATON_CA_FILE,
// BATON_CERT_FILE and BATON_KEY_FILE it presents that client certificate to an https:// internal
// listener (mutual TLS).
//
//   BATON_INTERNAL_URL=http://127.0.0.1:8081 node worker.mjs TASK [--concurrency N]
import { NonRetryable, Worker } from "../../sdk/typescript/dist/index.js";

const [name, ...rest] = process.argv.slice(2);
if (!name) {
  console.error("usage: worker.mjs TASK [--concurrency N]");
  process.exit(2);
}
const c = rest.indexOf("--concurrency");
const worker = new Worker({
  internalUrl: process.env.BATON_INTERNAL_URL ?? "http://127.0.0.1:8081",
  concurrency: c >= 0 ? Number(rest[c + 1]) : 4,
  healthPort: process.env.HEALTH_PORT ? Number(process.env.HEALTH_PORT) : undefined,
  tls: process.env.BATON_CERT_FILE
    ? { ca: process.env.BATON_CA_FILE, cert: process.env.BATON_CERT_FILE, key: process.env.BATON_KEY_FILE }
    : undefined,
});
worker.handle(name, (task) => {
  const input = task.input ?? {};
  if (input.fail) throw new NonRetryable(`asked to fail with ${input.fail}`, { category: input.fail });
  if (input.sleep) {
    const end = Date.now() + input.sleep * 1000;
    while (Date.now() < end && !task.shouldCancel()) {
      // a synchronous busy loop: only the heartbeat thread runs meanwhile
    }
  }
  let total = input.n ?? 0;
  for (const p of Object.values(task.parents)) total += p.total;
  return { by: "typescript-worker", task: task.key, total, parents: Object.keys(task.parents).sort() };
});
await worker.run();
