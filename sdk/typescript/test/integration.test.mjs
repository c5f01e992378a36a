// Integration tests against a real server named by BATON_URL, BATON_INTERNAL_URL, BATON_API_KEY and
// BATON_BLOB_URL (e.g. a `baton dev --blob-url file:///dir`). Every run uses its own random queue,
// task and pipeline names, so several runs can share a server. Skipped, saying which variable is
// unset, without them.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { ApiError, Client, NonRetryable, TaskError, TaskScope, Worker } from "../dist/index.js";

const need = ["BATON_URL", "BATON_INTERNAL_URL", "BATON_API_KEY", "BATON_BLOB_URL"];
const missing = need.filter((v) => !process.env[v]);
const skip = missing.length ? `integration tests need a server: ${missing.join(", ")} ${missing.length > 1 ? "are" : "is"} unset` : false;

const rand = () => randomBytes(4).toString("hex");
const quiet = { info() {}, warn() {}, error() {} };

function client() {
  return new Client({ url: process.env.BATON_URL, apiKey: process.env.BATON_API_KEY });
}

/** A worker on a queue of its own, running until the returned stop(). */
function startWorker(queue, handlers, opts = {}) {
  const w = new Worker({
    internalUrl: process.env.BATON_INTERNAL_URL,
    queues: [queue],
    concurrency: 4,
    handleSignals: false,
    pollWaitMs: 1000,
    heartbeatIntervalMs: 500,
    blobUrl: process.env.BATON_BLOB_URL,
    logger: quiet,
    ...opts,
  });
  for (const [name, h] of Object.entries(handlers)) w.handle(name, h);
  const running = w.run();
  return {
    worker: w,
    async stop() {
      w.stop();
      await running;
    },
  };
}

async function finish(c, jobId, timeoutMs = 90_000) {
  const ac = new AbortController();
  const t = setTimeout(() => ac.abort(new Error(`job ${jobId} did not finish within ${timeoutMs} ms`)), timeoutMs);
  try {
    let end;
    for await (const e of c.watch(jobId, { signal: ac.signal })) if (e.end) end = e;
    return { end, job: await c.get(jobId) };
  } finally {
    clearTimeout(t);
  }
}

describe("against a server", { skip, concurrency: false }, () => {
  test("producer: submit idempotently, get, list pages, events, addTasks, cancel, resume", async () => {
    const c = client();
    const q = `ts-prod-${rand()}`;
    const doc = { name: `ts-prod-${rand()}`, tasks: [{ taskId: "a", name: `${q}.noop`, queue: q, input: { x: 1 } }] };
    const key = `ts-key-${rand()}`;
    const first = await c.submit(doc, { idempotencyKey: key });
    const again = await c.submit(doc, { idempotencyKey: key });
    assert.equal(again.jobId, first.jobId);
    await assert.rejects(c.submit({ ...doc, name: "other" }, { idempotencyKey: key }), (e) => e instanceof ApiError && e.status === 422);
    const view = await c.get(first.jobId);
    assert.equal(view.tasks[0].taskId, "a");
    const added = await c.addTasks(first.jobId, { tasks: [{ taskId: "b", name: `${q}.noop`, queue: q, dependsOn: ["a"] }] });
    assert.ok(added);
    const page = await c.events(first.jobId);
    assert.ok(page.events.some((e) => e.type === "Job Created"));
    let seen = false;
    let n = 0;
    for await (const j of c.list({ pageSize: 2 })) {
      if (j.jobId === first.jobId) seen = true;
      if (++n >= 40 || seen) break;
    }
    assert.ok(seen, "list() pages to the job just submitted");
    const cancelled = await c.cancel(first.jobId);
    assert.equal(cancelled.jobId, first.jobId);
    const { end } = await finish(c, first.jobId);
    assert.equal(end.status, "canceled");
    const resumed = await c.resume(first.jobId);
    assert.equal(resumed.jobId, first.jobId);
    await c.cancel(first.jobId);
    await assert.rejects(c.get(`job-${rand()}`), (e) => e instanceof ApiError && e.status === 404 && e.code === "not_found");
  });

  test("worker: a DAG's outputs flow to children; categories decide retries", async () => {
    const q = `ts-dag-${rand()}`;
    const w = startWorker(q, {
      [`${q}.add`]: async (t) => {
        let sum = t.input.n;
        for (const p of Object.values(t.parents)) sum += p.sum;
        return { sum };
      },
      [`${q}.flaky`]: async (t) => {
        if (t.attempt === 1) throw new TaskError("USER_CODE", "flaky attempt 1", { retryable: true, code: "TRANSIENT" });
        return { attempt: t.attempt };
      },
      [`${q}.fatal`]: async () => {
        throw new NonRetryable("bad row", { category: "DATA_QUALITY" });
      },
      [`${q}.crash`]: async () => {
        throw new Error("unexpected");
      },
    });
    try {
      const c = client();
      const task = (taskId, name, extra = {}) => ({ taskId, name: `${q}.${name}`, queue: q, ...extra });
      const dag = await c.submit({
        tasks: [task("a", "add", { input: { n: 1 } }), task("b", "add", { input: { n: 10 }, dependsOn: ["a"] }), task("c", "add", { input: { n: 100 }, dependsOn: ["a", "b"] })],
      });
      const r1 = await finish(c, dag.jobId);
      assert.equal(r1.end.status, "completed");
      assert.deepEqual(r1.job.tasks.find((t) => t.taskId === "c").output, { sum: 112 });

      const mixed = await c.submit({
        tasks: [
          task("flaky", "flaky", { maxAttempts: 3, backoffBaseMs: 0 }),
          task("fatal", "fatal", { maxAttempts: 3 }),
          task("crash", "crash", { maxAttempts: 1 }),
        ],
      });
      const r2 = await finish(c, mixed.jobId);
      const by = Object.fromEntries(r2.job.tasks.map((t) => [t.taskId, t]));
      assert.equal(by.flaky.status, "completed");
      assert.equal(by.flaky.attempt, 2);
      assert.equal(by.fatal.status, "failed");
      assert.equal(by.fatal.attempt, 1);
      assert.equal(by.fatal.error.category, "DATA_QUALITY");
      assert.equal(by.crash.error.category, "USER_CODE");
      assert.match(by.crash.error.stackTrace, /Error: unexpected/);
    } finally {
      await w.stop();
    }
  });

  test("worker: heartbeats from their thread keep a busy-looping handler alive; cancel aborts the signal", async () => {
    const q = `ts-hb-${rand()}`;
    let sawCancelInLoop = false;
    const w = startWorker(q, {
      [`${q}.block`]: (t) => {
        const end = Date.now() + t.input.seconds * 1000;
        while (Date.now() < end) {
          // blocks the main thread
        }
        return { blocked: t.input.seconds };
      },
      [`${q}.spin`]: (t) => {
        // Another process cancels the job in a second, while this handler blocks the main thread
        // in a busy loop that polls shouldCancel(): the heartbeat thread sets the flag.
        spawn(
          process.execPath,
          [
            "-e",
            `setTimeout(() => fetch(process.env.BATON_URL + "/jobs/${t.jobId}/cancel", {method: "POST", headers: {"x-api-key": process.env.BATON_API_KEY}}), 1000)`,
          ],
          { stdio: "ignore" },
        );
        const end = Date.now() + 20_000;
        while (Date.now() < end) {
          if (t.shouldCancel()) {
            sawCancelInLoop = true;
            break;
          }
        }
        return { spun: true };
      },
      [`${q}.wait`]: async (t) => {
        await new Promise((resolve) => t.signal.addEventListener("abort", resolve, { once: true }));
        return { reason: t.signal.reason.kind };
      },
    });
    try {
      const c = client();
      const blocked = await c.submit({ tasks: [{ taskId: "b", name: `${q}.block`, queue: q, input: { seconds: 4 }, heartbeatTimeoutSeconds: 2 }] });
      const r = await finish(c, blocked.jobId);
      assert.equal(r.job.tasks[0].status, "completed");
      assert.equal(r.job.tasks[0].attempt, 1);

      const spin = await c.submit({ tasks: [{ taskId: "s", name: `${q}.spin`, queue: q }] });
      const waitJob = await c.submit({ tasks: [{ taskId: "w", name: `${q}.wait`, queue: q }] });
      for (let i = 0; i < 600; i++) {
        const j = await c.get(waitJob.jobId);
        if (j.tasks[0].status === "processing") break;
        await delay(100);
      }
      await c.cancel(waitJob.jobId);
      for (const id of [spin.jobId, waitJob.jobId]) {
        const { job } = await finish(c, id);
        assert.equal(job.tasks[0].status, "canceled");
      }
      assert.ok(sawCancelInLoop, "shouldCancel() turned true inside the busy loop");
    } finally {
      await w.stop();
    }
  });

  test("worker: stop() hands back a handler that outlives the shutdown grace", async () => {
    const q = `ts-stop-${rand()}`;
    let started = false;
    const w = startWorker(q, {
      [`${q}.long`]: async (t) => {
        started = true;
        await delay(60_000, undefined, { signal: t.signal }).catch(() => undefined);
        return { finished: true };
      },
    }, { shutdownGraceMs: 300 });
    const c = client();
    const job = await c.submit({ tasks: [{ taskId: "l", name: `${q}.long`, queue: q, maxAttempts: 2, backoffBaseMs: 60_000 }] });
    for (let i = 0; i < 600 && !started; i++) await delay(50);
    assert.ok(started);
    const t0 = Date.now();
    await w.stop();
    assert.ok(Date.now() - t0 < 20_000, "run() resolved soon after the grace");
    const view = await c.get(job.jobId);
    const ev = await c.events(job.jobId);
    const failed = ev.events.find((e) => e.type === "Task Processing Failed");
    assert.ok(failed, `the attempt was handed back: ${JSON.stringify(view.tasks[0])}`);
    assert.equal(failed.data.error.category, "INFRASTRUCTURE");
    await c.cancel(job.jobId);
  });

  test("pipelines, buffered publish, rows, query, the task scope and datasets", async (t) => {
    const c = client();
    const p = `ts_p_${rand()}`;
    const q = `ts-pipe-${rand()}`;
    const ds = `${p}_rows`;
    const yaml = (version) => `name: ${p}
jobs:
  - name: publish
    activation: source
    runtime: ecs_platform
    operator: ${q}.publish
    queue: ${q}
    outputs: 1
    source: {kind: manual}
    config: {version: ${version}}
  - name: read
    activation: reactive
    runtime: ecs_platform
    operator: ${q}.read
    queue: ${q}
    outputs: 0
    inputs:
      - from: {dataset: ${ds}}
publish:
  ${ds}:
    from: {job: publish, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: k, type: integer, required: true}
        - {name: v, type: string}
      unique: [k]
`;
    const deployed = await c.pipelines.deploy(yaml(1));
    assert.equal(deployed.name, p);
    const scoped = {};
    const w = startWorker(q, {
      [`${q}.publish`]: async (t) => {
        const b = await t.publishBatch(ds, [
          { k: 1, v: "a" },
          { k: 2, v: "b" },
          { k: 3, v: "c" },
        ]);
        assert.equal(b.rows, 3);
        await assert.rejects(t.publishBatch("not_an_output", [{ k: 1 }]), /not a buffered output/);
        return { published: b.rows };
      },
      [`${q}.read`]: async (t) => {
        const input = t.pipeline.inputs[0];
        let rows = 0;
        for await (const _ of t.rows(input, { pageSize: 2 })) rows++;
        const r = await t.query(`SELECT count(*) AS n, sum(k) AS s FROM "${ds}"`);
        // The same reads with the capability token alone, as untrusted code would make them.
        const scope = new TaskScope({ url: process.env.BATON_URL, token: t.capabilityToken });
        const hb = await scope.heartbeat();
        scoped.heartbeat = hb.ok;
        scoped.rows = 0;
        for await (const _ of scope.rows(input.dataset_name ?? input.dataset_uuid)) scoped.rows++;
        scoped.query = (await scope.query(`SELECT count(*) AS n FROM "${ds}"`)).rows[0][0];
        await assert.rejects(
          async () => {
            for await (const _ of scope.rows("no_such_dataset_" + rand()));
          },
          (e) => e instanceof ApiError && e.status === 403,
        );
        return { rows, n: Number(r.rows[0][0]), s: Number(r.rows[0][1]) };
      },
    });
    try {
      const res = await fetch(`${process.env.BATON_URL}/pipelines/${p}/jobs/publish/run`, { method: "POST", headers: { "x-api-key": process.env.BATON_API_KEY } });
      assert.equal(res.status < 300, true, await res.text());
      // The read task's job is named after the pipeline job; other suites may share the server,
      // so the newest job need not be it.
      let readOut;
      const deadline = Date.now() + 90_000;
      while (!readOut && Date.now() < deadline) {
        let seen = 0;
        for await (const j of c.list({ pageSize: 50 })) {
          if (++seen > 500) break;
          if (j.name !== `${p}.read`) continue;
          const v = await c.get(j.jobId);
          const rt = v.tasks.find((x) => x.name === `${q}.read` && x.status === "completed");
          if (rt) readOut = rt.output;
          break;
        }
        if (!readOut) await delay(200);
      }
      if (!readOut) {
        let loaded = 0;
        for await (const _ of c.datasets.rows(ds)) loaded++;
        if (loaded === 0) {
          t.skip("no sink loaded the published batch within 90 s: run the server with one (baton dev --sink=true, baton server --sink)");
          return;
        }
      }
      assert.deepEqual(readOut, { rows: 3, n: 3, s: 6 });
      assert.deepEqual(scoped, { heartbeat: true, rows: 3, query: 3 });

      const dataset = await c.datasets.get(ds);
      assert.equal(dataset.name ?? ds, ds);
      const rows = [];
      for await (const r of c.datasets.rows(ds, { pageSize: 2 })) rows.push(r.k);
      assert.deepEqual(rows.sort(), [1, 2, 3]);
      const qr = await c.query(`SELECT sum(k) AS s FROM "${ds}"`);
      assert.equal(Number(qr.rows[0][0]), 6);
      await assert.rejects(c.query("DELETE FROM x"), (e) => e instanceof ApiError && e.status === 400);

      const v2 = await c.pipelines.deploy(yaml(2));
      assert.notEqual(v2.version, deployed.version);
      const got = await c.pipelines.get(p);
      assert.equal(got.name, p);
      const rb = await c.pipelines.rollback(p, { version: deployed.version });
      assert.equal(rb.active_version, deployed.version);
    } finally {
      await w.stop();
    }
  });

  test("bundles: list, a missing bundle, an upload that is no zip", async () => {
    const c = client();
    await assert.rejects(c.bundles.upload(new Uint8Array([0x50, 0x4b, 3, 4, 1, 2, 3])), (e) => e instanceof ApiError && e.status === 400 && /zip/.test(e.message));
    const page = await c.bundles.listPage({ limit: 5 });
    assert.ok(Array.isArray(page.bundles));
    await assert.rejects(c.bundles.get(`bndl_${rand()}`), (e) => e instanceof ApiError && e.status === 404);
  });
});
