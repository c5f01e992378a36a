#!/usr/bin/env node
// Compares the worker's two HTTP clients of the internal listener on its hot path: N claim-batch
// requests (an empty queue, no wait) with C in flight, through node:http with a keep-alive agent
// and through fetch, alternately, ROUNDS times; prints requests/s and CPU ms per request of each.
//
//   BATON_INTERNAL_URL=http://127.0.0.1:8081 node transport.mjs [N] [C] [ROUNDS]
import { fetchTransport, nodeTransport } from "../dist/index.js";

const url = process.env.BATON_INTERNAL_URL;
if (!url) {
  console.error("transport: BATON_INTERNAL_URL is not set");
  process.exit(2);
}
const [n = 2000, c = 16, rounds = 3] = process.argv.slice(2).map(Number);
const body = JSON.stringify({ worker_id: "transport-bench", streams: [`transport-bench-${process.pid}`], max_wait_ms: 0, max_tasks: 256 });

async function run(t) {
  let next = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next++ < n) {
        const a = await t.request({ method: "POST", url: url + "/internal/worker/claim-batch", headers: { "content-type": "application/json" }, body });
        if (a.status !== 200) throw new Error(`claim-batch answered ${a.status}`);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { rps: n / secs, cpuMsPerReq: (cpu.user + cpu.system) / 1000 / n };
}

const results = { node: [], fetch: [] };
const transports = { node: nodeTransport({ maxSockets: c }), fetch: fetchTransport() };
await run(transports.node);
await run(transports.fetch);
for (let r = 0; r < rounds; r++) for (const k of ["node", "fetch"]) results[k].push(await run(transports[k]));
for (const [k, rs] of Object.entries(results)) {
  const rps = rs.map((x) => x.rps).sort((a, b) => a - b)[Math.floor(rs.length / 2)];
  const cpu = rs.map((x) => x.cpuMsPerReq).sort((a, b) => a - b)[Math.floor(rs.length / 2)];
  console.log(JSON.stringify({ transport: k, median_requests_per_second: Math.round(rps), median_cpu_ms_per_request: +cpu.toFixed(3) }));
}
transports.node.close();
