// Unit tests: no server needed.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  ApiError,
  CATEGORIES,
  NonRetryable,
  RetryAfter,
  TaskError,
  checkPush,
  failureOf,
  parseRetryAfter,
  parseSSE,
  retryableByDefault,
  runLocal,
  signPush,
  signV4,
  toJsonl,
  tokenClaims,
  verifyPush,
  Client,
  Worker,
  TaskScope,
  PushUnauthorizedError,
} from "../dist/index.js";
import { generate, generateFile } from "../scripts/gen-wire.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));

test("src/wire.ts is what the generator makes of internal/api/openapi.json", () => {
  const committed = readFileSync(join(here, "../src/wire.ts"), "utf8");
  const fresh = generateFile();
  assert.ok(
    committed === fresh,
    "src/wire.ts differs from the server's OpenAPI document: run `npm --prefix sdk/typescript run gen` and commit src/wire.ts",
  );
});

test("the generator writes one type per schema with required and optional members", () => {
  const text = generate({
    components: {
      schemas: {
        Pet: {
          type: "object",
          description: "A pet.",
          required: ["name"],
          properties: {
            name: { type: "string" },
            age: { type: ["integer", "null"] },
            kind: { enum: ["cat", "dog"] },
            tags: { type: "array", items: { $ref: "#/components/schemas/Tag" } },
          },
          additionalProperties: false,
        },
        Tag: { type: "string" },
        Both: { allOf: [{ $ref: "#/components/schemas/Pet" }, { type: "object", properties: { x: { const: true } } }] },
      },
    },
  });
  assert.match(text, /\/\*\* A pet\. \*\/\nexport interface Pet \{\n  name: string;\n  age\?: number \| null;\n  kind\?: "cat" \| "dog";\n  tags\?: Tag\[\];\n\}/);
  assert.match(text, /export type Tag = string;/);
  assert.match(text, /export type Both = Pet & \{/);
  assert.throws(() => generate({}), /components\.schemas/);
  assert.throws(() => generate({ components: { schemas: { X: { $ref: "http://elsewhere" } } } }), /unsupported \$ref/);
});

test("categories and their retry defaults follow the contracts", () => {
  assert.deepEqual([...CATEGORIES], ["USER_CODE", "DATA_QUALITY", "INFRASTRUCTURE", "CONFIGURATION", "TIMEOUT", "CANCELLED"]);
  const retried = CATEGORIES.filter(retryableByDefault);
  assert.deepEqual(retried, ["USER_CODE", "INFRASTRUCTURE", "TIMEOUT"]);
  assert.throws(() => new TaskError("OOPS", "x"), /category "OOPS" is not one of/);
  assert.throws(() => new TaskError("DATA_QUALITY", "x", { code: "E1" }), /category USER_CODE/);
  assert.throws(() => new RetryAfter(-1), /non-negative/);
  const nr = new NonRetryable("bad input", { category: "DATA_QUALITY" });
  assert.equal(nr.retryable, false);
  assert.equal(nr.willRetry, false);
  assert.equal(new TaskError("TIMEOUT", "slow").willRetry, true);
  assert.equal(new TaskError("CONFIGURATION", "no key").willRetry, false);
  const ra = new RetryAfter(2.5, "busy");
  assert.equal(ra.seconds, 2.5);
  assert.equal(ra.retryable, true);
  assert.equal(ra.category, "USER_CODE");
});

test("failureOf classifies what a handler throws", () => {
  const f1 = failureOf(new TaskError("DATA_QUALITY", "bad row", { retryable: false }));
  assert.equal(f1.code, "DATA_QUALITY");
  assert.equal(f1.message, "bad row");
  assert.equal(f1.retryable, false);
  const f2 = failureOf(new Error("boom"));
  assert.equal(f2.code, "USER_CODE");
  assert.equal(f2.retryable, true);
  assert.match(f2.stack, /Error: boom\n\s+at /);
  const f3 = failureOf("a string");
  assert.equal(f3.code, "USER_CODE");
  assert.match(f3.message, /non-Error thrown: a string/);
  assert.equal(failureOf(new TaskError("USER_CODE", "flaky", { code: "TRANSIENT", retryable: true })).code, "TRANSIENT");
  assert.ok(failureOf(new Error("x".repeat(100_000))).message.endsWith("…(truncated)"));
});

test("Retry-After and answers turn into ApiErrors", async () => {
  assert.equal(parseRetryAfter("2"), 2);
  assert.equal(parseRetryAfter(null), 0);
  assert.equal(parseRetryAfter("soon"), 0);
  const at = new Date(Date.now() + 5000).toUTCString();
  assert.ok(parseRetryAfter(at) > 3 && parseRetryAfter(at) <= 5);
  const e = new ApiError(409, "lease_mismatch", "not yours");
  assert.equal(e.gone, true);
  assert.equal(e.transient, false);
  assert.equal(new ApiError(503, "unavailable", "").transient, true);
  assert.equal(new ApiError(429, "rate_limited", "").transient, true);
});

test("the clients refuse bad options with clear errors", () => {
  assert.throws(() => new Client({ url: "ftp://x", apiKey: "k" }), /want http\(s\)/);
  assert.throws(() => new Client({ url: "http://127.0.0.1:1" }), /apiKey/);
  assert.throws(() => new Worker({ internalUrl: "nope" }), /want http\(s\)/);
  assert.throws(() => new Worker({ internalUrl: "http://127.0.0.1:1", concurrency: 0 }), /concurrency must be a positive integer/);
  assert.throws(() => new Worker({ internalUrl: "http://127.0.0.1:1", pollWaitMs: 61_000 }), /above the server's limit/);
  assert.throws(() => new Worker({ internalUrl: "http://127.0.0.1:1", queues: [""] }), /queues/);
  assert.throws(() => new Worker({ internalUrl: "http://127.0.0.1:1", transport: "fetch", tls: { cert: "x" } }), /node transport/);
  const w = new Worker({ internalUrl: "http://127.0.0.1:1" });
  assert.throws(() => w.handle("", async () => 1), /task name/);
  assert.throws(() => new TaskScope({ url: "http://127.0.0.1:1", token: "not-a-jwt" }), /capability token/);
  const c = new Client({ url: "http://127.0.0.1:1/", apiKey: "k" });
  assert.equal(c.url, "http://127.0.0.1:1");
  assert.throws(() => c.submit({}), /tasks array/);
  assert.throws(() => c.query(" "), /SQL/);
});

test("a worker without handlers or queues does not start", async () => {
  const w = new Worker({ internalUrl: "http://127.0.0.1:1", handleSignals: false });
  await assert.rejects(w.run(), /no handlers registered/);
});

test("a worker whose claims fail is unhealthy, and stop() ends run()", async () => {
  // Port 9 on loopback: nothing listens, every claim fails at once.
  const w = new Worker({ internalUrl: "http://127.0.0.1:9", handleSignals: false, unhealthyAfter: 2, healthPort: 0, logger: { info() {}, warn() {}, error() {} } });
  w.handle("x", async () => null);
  const done = w.run();
  let status = 0;
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 50));
    const a = w.healthAddress;
    if (!a) continue;
    const res = await fetch(`http://127.0.0.1:${a.port}/healthz`);
    status = res.status;
    if (status === 503) break;
  }
  assert.equal(status, 503);
  assert.equal(w.healthy(), false);
  w.stop();
  await done;
});

test("verifyPush accepts the contract's test vector and refuses tampering", () => {
  const body = '{"taskId":"t-1"}\n';
  const headers = {
    Authorization: "Bearer shh-its-a-secret",
    "Baton-Timestamp": "1700000000",
    "Baton-Signature": "v1=949cd577deba4de4fa9cb8117b0afeb450c1749269be9d1e2431856b37f1e758",
  };
  assert.equal(verifyPush(headers, body, "shh-its-a-secret", { now: 1700000100 }), true);
  assert.equal(verifyPush(new Headers(headers), Buffer.from(body), "shh-its-a-secret", { now: 1700000100 }), true);
  assert.equal(verifyPush(headers, body, "shh-its-a-secret", { now: 1700000301 }), false);
  assert.equal(verifyPush(headers, body + " ", "shh-its-a-secret", { now: 1700000100 }), false);
  assert.equal(verifyPush(headers, body, "another-secret", { now: 1700000100 }), false);
  assert.throws(() => checkPush({ ...headers, "Baton-Timestamp": "17e8" }, body, "shh-its-a-secret"), PushUnauthorizedError);
  assert.throws(() => checkPush({ ...headers, "Baton-Signature": "v1=ABC" }, body, "shh-its-a-secret", { now: 1700000000 }), /64 lowercase hex/);
  assert.throws(() => checkPush({ ...headers, Authorization: "" }, body, "shh-its-a-secret"), /bearer secret/);
  const signed = signPush(body, "s3cret", 1700000000);
  assert.equal(verifyPush(signed, body, "s3cret", { now: 1700000000 }), true);
  assert.equal(signPush(body, "shh-its-a-secret", 1700000000)["baton-signature"], headers["Baton-Signature"]);
});

test("signV4 reproduces AWS's documented S3 GET example", () => {
  // https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html (GET Object)
  const auth = signV4({
    method: "GET",
    url: "https://examplebucket.s3.amazonaws.com/test.txt",
    headers: {
      host: "examplebucket.s3.amazonaws.com",
      range: "bytes=0-9",
      "x-amz-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "x-amz-date": "20130524T000000Z",
    },
    payloadHash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    region: "us-east-1",
    accessKeyId: "AKIAIOSFODNN7EXAMPLE",
    secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    amzDate: "20130524T000000Z",
  });
  assert.equal(
    auth,
    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
  );
});

test("parseSSE reads events split across chunks, with comments and CRLF", async () => {
  const text = ": keep-alive\r\n\r\nid: 10\nevent: Task Failed\ndata: {\"id\":10}\n\nid: 11\nevent: x\ndata: a\ndata: b\n\nevent: end\ndata: {\"status\":\"completed\"}\n\n";
  const enc = new TextEncoder().encode(text);
  async function* chunks() {
    for (let i = 0; i < enc.length; i += 7) yield enc.slice(i, i + 7);
  }
  const got = [];
  for await (const m of parseSSE(chunks())) got.push(m);
  assert.deepEqual(got, [
    { id: "10", event: "Task Failed", data: '{"id":10}' },
    { id: "11", event: "x", data: "a\nb" },
    { id: undefined, event: "end", data: '{"status":"completed"}' },
  ]);
});

test("toJsonl and tokenClaims", () => {
  assert.equal(toJsonl([{ a: 1 }, [2], "x"]), '{"a":1}\n[2]\n"x"\n');
  assert.throws(() => toJsonl([undefined]), /row 1 is not a JSON value/);
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => toJsonl([cyclic]), /row 1/);
  const token = ["e30", Buffer.from(JSON.stringify({ task_id: "t", attempt: 2, lease_token: "l" })).toString("base64url"), "sig"].join(".");
  assert.deepEqual(tokenClaims(token), { task_id: "t", attempt: 2, lease_token: "l" });
  const scope = new TaskScope({ url: "http://127.0.0.1:1", token });
  assert.equal(scope.taskId, "t");
  assert.equal(scope.attempt, 2);
  assert.equal(scope.leaseToken, "l");
});

test("TaskScope.fromEnv reads the child's environment and says what is missing", async () => {
  await assert.rejects(TaskScope.fromEnv({}), /TRACE_TASK_CAPABILITY_TOKEN is not set/);
  const token = ["e30", Buffer.from(JSON.stringify({ task_id: "t1", attempt: 1, lease_token: "l1" })).toString("base64url"), "s"].join(".");
  await assert.rejects(TaskScope.fromEnv({ TRACE_TASK_CAPABILITY_TOKEN: token }), /BATON_URL is not set/);
  const dir = await mkdtemp(join(tmpdir(), "baton-ts-"));
  const payload = join(dir, "payload.json");
  const { writeFile } = await import("node:fs/promises");
  await writeFile(payload, JSON.stringify({ input: { n: 3 }, dependency_outputs: { a: 1 } }));
  const s = await TaskScope.fromEnv({
    TRACE_TASK_CAPABILITY_TOKEN: token,
    BATON_URL: "http://127.0.0.1:1",
    BATON_TASK_PAYLOAD: payload,
    BATON_ATTEMPT: "1",
    BATON_BUFFER_DIR: dir,
  });
  assert.deepEqual(s.input, { n: 3 });
  assert.deepEqual(s.parents, { a: 1 });
  const path = await s.bufferRows("alerts", [{ id: 1 }, { id: 2 }]);
  assert.equal(await readFile(path, "utf8"), '{"id":1}\n{"id":2}\n');
  await assert.rejects(s.bufferRows("../x", []), /not a dataset name/);
  await assert.rejects(TaskScope.fromEnv({ TRACE_TASK_CAPABILITY_TOKEN: token, BATON_URL: "http://x", BATON_ATTEMPT: "zero" }), /not a positive integer/);
});

test("runLocal reports outputs, failures, cancellation and what the handler did", async () => {
  const add = async (task) => {
    await task.heartbeat();
    await task.events([{ dataset_uuid: "d", dataset_version: "v", cursor: 1 }]);
    await task.publishBatch("out", [{ k: 1 }]);
    let sum = task.input.n;
    for (const p of Object.values(task.parents)) sum += p.sum;
    return { sum };
  };
  const ok = await runLocal(add, { n: 1 }, { parents: { a: { sum: 10 } } });
  assert.equal(ok.status, "completed");
  assert.deepEqual(ok.output, { sum: 11 });
  assert.equal(ok.heartbeats, 1);
  assert.deepEqual(ok.events, [{ dataset_uuid: "d", dataset_version: "v", cursor: 1 }]);
  assert.deepEqual(ok.published, [{ dataset: "out", rows: [{ k: 1 }] }]);

  const bad = await runLocal(async () => {
    throw new TaskError("DATA_QUALITY", "bad row", { retryable: false });
  });
  assert.equal(bad.status, "failed");
  assert.equal(bad.error.category, "DATA_QUALITY");
  assert.equal(bad.error.retryable, false);

  const boom = await runLocal(async () => {
    throw new Error("boom");
  });
  assert.equal(boom.error.category, "USER_CODE");
  assert.equal(boom.error.retryable, true);

  const cancelled = await runLocal(
    (task) =>
      new Promise((resolve) => {
        task.signal.addEventListener("abort", () => resolve(task.signal.reason.kind));
      }),
    {},
    { cancelAfterMs: 20 },
  );
  assert.equal(cancelled.status, "canceled");

  const rows = await runLocal(
    async (task) => {
      const got = [];
      for await (const r of task.rows("readings", { where: { level: "high" } })) got.push(r.id);
      return got;
    },
    {},
    { rows: { readings: [{ id: 1, level: "high" }, { id: 2, level: "low" }, { id: 3, level: "high" }] } },
  );
  assert.deepEqual(rows.output, [1, 3]);
});
