#!/usr/bin/env node
// A push target: an HTTP server that checks each delivery's Baton signature (BATON_PUSH_SECRET),
// answers 202 at once, runs the task and reports it through the callback dialect.
//
//   BATON_PUSH_SECRET=... node push_target.mjs --listen 127.0.0.1:8090
//   baton dev --push-target NAME=http://127.0.0.1:8090/run --push-secret NAME=...
import { createServer } from "node:http";
import { pushHandler } from "../../sdk/typescript/dist/index.js";

const args = process.argv.slice(2);
const at = args.indexOf("--listen");
const listen = at >= 0 ? args[at + 1] : "127.0.0.1:8090";
const secret = process.env.BATON_PUSH_SECRET;
if (!secret) {
  console.error("push_target: BATON_PUSH_SECRET is not set");
  process.exit(2);
}
const handler = pushHandler(
  async (task) => {
    let total = task.input?.n ?? 0;
    for (const p of Object.values(task.parents)) total += p.total;
    return { by: "push", task: task.key, total, parents: Object.keys(task.parents).sort() };
  },
  { secret, workerId: "typescript-push-target" },
);
const i = listen.lastIndexOf(":");
const server = createServer(handler).listen(Number(listen.slice(i + 1)), listen.slice(0, i), () => console.error(`push target on http://${listen}`));
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
