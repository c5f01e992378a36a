/**
 * The protocol between a {@link Worker}'s main thread and its heartbeat thread.
 * @internal
 * @module
 */
import type { TlsOptions } from "./http.js";

/** Flag bit of a slot (flag = gen << 2 | bits): cancellation was requested. */
export const FLAG_CANCEL = 1;
/** Flag bit of a slot: a heartbeat was refused, the lease is lost. */
export const FLAG_LOST = 2;

/** Sets `bits` on slot's flag if the slot still runs generation `gen`; reports whether it did. */
export function setFlag(flags: Int32Array, slot: number, gen: number, bits: number): boolean {
  for (;;) {
    const v = Atomics.load(flags, slot);
    if (v >>> 2 !== gen) return false;
    if (Atomics.compareExchange(flags, slot, v, v | bits) === v) return true;
  }
}

/**
 * Messages from the main thread. An attempt's end needs none: the main thread clears its slot's
 * flag (generation 0, which no attempt has), and the heartbeat thread stops beating it.
 */
export type ToThread =
  | { t: "start"; items: { slot: number; gen: number; taskId: string; attempt: number; lease: string; everyMs: number; leaseMs: number }[] }
  | { t: "beat"; slot: number; gen: number }
  | { t: "close" };

/** Messages to the main thread. */
export type FromThread =
  | { t: "cancel"; slot: number; gen: number; reason: string }
  | { t: "lost"; slot: number; gen: number; message: string }
  | { t: "token"; slot: number; gen: number; token: string; expiresAt: string }
  | { t: "warn"; message: string };

/** What the thread is started with. */
export interface ThreadData {
  /** Marks the thread as a Baton heartbeat thread. */
  batonHeartbeat: true;
  url: string;
  workerId: string;
  flags: SharedArrayBuffer;
  transport: "node" | "fetch";
  tls?: TlsOptions;
}

