#!/usr/bin/env node
// A task-scoped child for `baton worker --exec 'node scoped_child.mjs'` (or the entry of a user
// code bundle): with nothing but its capability token from the environment it heartbeats, then
// completes its own attempt through /v1/task/complete with {by, task, total, parents}, and prints
// nothing (the wrapper's report of the same outcome is then a duplicate).
import { TaskScope } from "../../sdk/typescript/dist/index.js";

const scope = await TaskScope.fromEnv();
const hb = await scope.heartbeat();
if (hb.should_cancel) {
  await scope.complete({ status: "Canceled" });
  process.exit(0);
}
const payload = scope.payload ?? {};
let total = scope.input?.n ?? 0;
for (const p of Object.values(scope.parents)) total += p.total;
await scope.complete({
  status: "Completed",
  output: { by: "task-scoped", task: payload.task_key, total, parents: Object.keys(scope.parents).sort() },
});
