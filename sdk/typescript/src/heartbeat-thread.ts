/**
 * The heartbeat thread of a {@link Worker}: a `worker_threads` Worker with its own event loop and
 * its own HTTP client, so that heartbeats go out while a handler blocks the main thread. The main
 * thread tells it which attempts run in which slot; it beats them, and passes back what it
 * learns (cancellation requested, lease lost, a fresh capability token) through a
 * SharedArrayBuffer flag per slot and a message.
 * @internal
 * @module
 */
import { parentPort, workerData } from "node:worker_threads";
import { ApiError } from "./errors.js";
import { Backoff, fetchTransport, jsonCall, nodeTransport, type Transport } from "./http.js";
import { FLAG_CANCEL, FLAG_LOST, setFlag, type FromThread, type ThreadData, type ToThread } from "./flags.js";

interface Beating {
  slot: number;
  gen: number;
  taskId: string;
  attempt: number;
  lease: string;
  everyMs: number;
  /** The lease's length (ms; 0 when the claim gave none). */
  leaseMs: number;
  /** When the next beat is due (ms since the epoch). */
  dueAt: number;
  inflight: boolean;
  again: boolean;
  cancelled: boolean;
  backoff?: Backoff;
  stopped: boolean;
}

/** How often the thread looks for due heartbeats, in ms. */
const TICK_MS = 50;

interface HeartbeatAnswer {
  should_cancel?: boolean;
  cancel_reason?: string | null;
  capability_token?: string;
  capability_token_expires_at?: string;
}

function main(): void {
  const port = parentPort;
  const data = workerData as ThreadData | undefined;
  if (!port || !data || data.batonHeartbeat !== true) return;
  const flags = new Int32Array(data.flags);
  const transport: Transport = data.transport === "fetch" ? fetchTransport() : nodeTransport({ maxSockets: 16, tls: data.tls });
  const slots = new Map<number, Beating>();
  const post = (m: FromThread) => port.postMessage(m);

  const schedule = (b: Beating, ms: number) => {
    b.dueAt = Date.now() + ms;
  };
  // The main thread ends an attempt by clearing its slot's flag (a generation no attempt has): a
  // slot whose flag names another generation is no longer beaten. One ticker serves every slot,
  // so an attempt costs no timer of its own.
  const ticker = setInterval(() => {
    const now = Date.now();
    for (const b of slots.values()) {
      if (Atomics.load(flags, b.slot) >>> 2 !== b.gen) {
        b.stopped = true;
        slots.delete(b.slot);
        continue;
      }
      if (!b.inflight && now >= b.dueAt) void beat(b);
    }
  }, TICK_MS);

  const beat = async (b: Beating): Promise<void> => {
    if (b.stopped) return;
    if (b.inflight) {
      b.again = true;
      return;
    }
    b.inflight = true;
    try {
      const ans = await jsonCall<HeartbeatAnswer>(
        transport,
        data.url,
        "POST",
        "/internal/worker/heartbeat",
        { worker_id: data.workerId, job_id: b.taskId, lease_token: b.lease, attempt_id: b.attempt },
        // Waited for up to half the lease, not only the interval: a server slower than the
        // interval (a busy machine) still applies a late heartbeat, and one given up on is lost.
        { timeoutMs: Math.min(30_000, Math.max(b.everyMs, b.leaseMs / 2, 1000)) },
      );
      if (b.stopped) return;
      b.backoff?.reset();
      if (ans?.capability_token) post({ t: "token", slot: b.slot, gen: b.gen, token: ans.capability_token, expiresAt: ans.capability_token_expires_at ?? "" });
      if (ans?.should_cancel && !b.cancelled) {
        b.cancelled = true;
        setFlag(flags, b.slot, b.gen, FLAG_CANCEL);
        post({ t: "cancel", slot: b.slot, gen: b.gen, reason: ans.cancel_reason ?? "user_requested" });
      }
      schedule(b, b.everyMs);
    } catch (e) {
      if (b.stopped) return;
      if (e instanceof ApiError && !e.transient) {
        // 409, 410, 404 (or another refusal): the attempt is no longer this worker's.
        b.stopped = true;
        slots.delete(b.slot);
        setFlag(flags, b.slot, b.gen, FLAG_LOST);
        post({ t: "lost", slot: b.slot, gen: b.gen, message: e.message });
        return;
      }
      post({ t: "warn", message: `heartbeat of task ${b.taskId} attempt ${b.attempt} failed, retrying: ${(e as Error).message}` });
      // Never later than the next beat would be: the lease must not run out meanwhile.
      b.backoff ??= new Backoff();
      schedule(b, Math.min(b.everyMs, b.backoff.after(e)));
    } finally {
      b.inflight = false;
      if (b.again && !b.stopped) {
        b.again = false;
        void beat(b);
      }
    }
  };

  const stop = (slot: number, gen: number) => {
    const b = slots.get(slot);
    if (!b || b.gen !== gen) return;
    b.stopped = true;
    slots.delete(slot);
  };

  port.on("message", (m: ToThread) => {
    switch (m.t) {
      case "start":
        for (const it of m.items) {
          const old = slots.get(it.slot);
          if (old) stop(old.slot, old.gen);
          slots.set(it.slot, { ...it, dueAt: Date.now() + it.everyMs, inflight: false, again: false, cancelled: false, stopped: false });
        }
        break;
      case "beat": {
        const b = slots.get(m.slot);
        if (b && b.gen === m.gen) void beat(b);
        break;
      }
      case "close":
        clearInterval(ticker);
        for (const b of [...slots.values()]) stop(b.slot, b.gen);
        transport.close();
        port.close();
        break;
    }
  });
}

main();
