/**
 * Writing a batch to the server's object storage: a `file://` directory directly, an `s3://`
 * bucket with a SigV4-signed PUT (node:crypto) under the attempt's minted credentials.
 * @module
 */
import { createHash, createHmac } from "node:crypto";
import { mkdir, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { ApiError } from "./errors.js";


/** Short-lived object storage credentials of one attempt (`/v1/task/credentials`). */
export interface StorageCredentials {
  access_key_id: string;
  secret_access_key: string;
  session_token?: string;
  expiration?: string;
  endpoint_url?: string;
  region?: string;
  read_prefixes?: string[];
  write_prefixes?: string[];
}

/** The canonical form of a `file://` root or prefix: `file:///abs/dir/`. */
export function canonicalFileRoot(u: string): string {
  if (!/^file:/i.test(u)) throw new Error(`baton: ${JSON.stringify(u)} is not a file:// URL`);
  let rest = u.slice(u.indexOf(":") + 1);
  if (rest.startsWith("//")) rest = rest.slice(2);
  if (!rest.startsWith("/")) throw new Error(`baton: ${JSON.stringify(u)}: want file:///absolute/dir`);
  if (!rest.endsWith("/")) rest += "/";
  return "file://" + rest;
}

/** Writes `data` to the `file://` URI `uri` (creating its directories), atomically; returns `uri`. */
export async function writeFileObject(uri: string, data: Uint8Array | string): Promise<string> {
  const path = fileURLToPath(uri);
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}-${Date.now()}`;
  await writeFile(tmp, data);
  await rename(tmp, path);
  return uri;
}

/** The bucket and key of `s3://bucket/key`. */
export function parseS3(uri: string): { bucket: string; key: string } {
  const m = /^s3:\/\/([^/]+)\/?(.*)$/i.exec(uri);
  if (!m) throw new Error(`baton: ${JSON.stringify(uri)} is not an s3://bucket/key URL`);
  return { bucket: m[1], key: m[2] };
}

function sha256hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

function hmac(key: Buffer | string, data: string): Buffer {
  return createHmac("sha256", key).update(data).digest();
}

/** RFC 3986 encoding, as SigV4 wants it (`/` kept in paths). */
function uriEncode(s: string, keepSlash: boolean): string {
  let out = "";
  for (const b of Buffer.from(s, "utf8")) {
    const c = String.fromCharCode(b);
    if (/[A-Za-z0-9\-._~]/.test(c) || (keepSlash && c === "/")) out += c;
    else out += "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/** A request to sign with {@link signV4}. */
export interface SignRequest {
  method: string;
  /** Absolute URL. */
  url: string;
  headers: Record<string, string>;
  /** The payload's SHA-256 hex, or `UNSIGNED-PAYLOAD`. */
  payloadHash: string;
  region: string;
  service?: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** `YYYYMMDDTHHMMSSZ`. */
  amzDate: string;
}

/**
 * Signs a request with AWS Signature Version 4; returns the `Authorization` header's value. The
 * headers given (lower-cased names; `host` and `x-amz-date` among them) are all signed.
 */
export function signV4(r: SignRequest): string {
  const u = new URL(r.url);
  const service = r.service ?? "s3";
  const names = Object.keys(r.headers)
    .map((k) => k.toLowerCase())
    .sort();
  const lower: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) lower[k.toLowerCase()] = String(v).trim().replace(/\s+/g, " ");
  const canonicalHeaders = names.map((n) => `${n}:${lower[n]}\n`).join("");
  const signedHeaders = names.join(";");
  const params = [...u.searchParams.entries()]
    .map(([k, v]) => [uriEncode(k, false), uriEncode(v, false)])
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  const path = uriEncode(decodeURIComponent(u.pathname), true) || "/";
  const canonical = [r.method, path, params, canonicalHeaders, signedHeaders, r.payloadHash].join("\n");
  const day = r.amzDate.slice(0, 8);
  const scope = `${day}/${r.region}/${service}/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", r.amzDate, scope, sha256hex(canonical)].join("\n");
  const kDate = hmac("AWS4" + r.secretAccessKey, day);
  const kRegion = hmac(kDate, r.region);
  const kService = hmac(kRegion, service);
  const kSigning = hmac(kService, "aws4_request");
  const signature = createHmac("sha256", kSigning).update(toSign).digest("hex");
  return `AWS4-HMAC-SHA256 Credential=${r.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
}

/** `YYYYMMDDTHHMMSSZ` of `d`. */
export function amzDate(d = new Date()): string {
  return d.toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
}

/**
 * PUTs `data` to `s3://bucket/key` with the attempt's credentials (path-style addressing on the
 * credentials' endpoint, or AWS's regional endpoint); returns the object's `s3://` URI.
 */
export async function putS3Object(
  creds: StorageCredentials,
  uri: string,
  data: Uint8Array | string,
  contentType: string,
  signal?: AbortSignal,
): Promise<string> {
  const { bucket, key } = parseS3(uri);
  if (!key) throw new Error(`baton: ${uri}: no object key`);
  const region = creds.region || "us-east-1";
  const endpoint = (creds.endpoint_url || `https://s3.${region}.amazonaws.com`).replace(/\/+$/, "");
  const url = `${endpoint}/${uriEncode(bucket, false)}/${uriEncode(key, true)}`;
  const body = typeof data === "string" ? Buffer.from(data) : data;
  const headers: Record<string, string> = {
    host: new URL(url).host,
    "content-type": contentType,
    "x-amz-content-sha256": sha256hex(body),
    "x-amz-date": amzDate(),
  };
  if (creds.session_token) headers["x-amz-security-token"] = creds.session_token;
  headers["authorization"] = signV4({
    method: "PUT",
    url,
    headers: { ...headers },
    payloadHash: headers["x-amz-content-sha256"],
    region,
    accessKeyId: creds.access_key_id,
    secretAccessKey: creds.secret_access_key,
    amzDate: headers["x-amz-date"],
  });
  const send = { ...headers };
  delete (send as Record<string, string>).host;
  const res = await fetch(url, { method: "PUT", headers: send, body, signal });
  if (!res.ok) {
    const text = await res.text();
    const code = /<Code>([^<]+)<\/Code>/.exec(text)?.[1] ?? String(res.status);
    const msg = /<Message>([^<]+)<\/Message>/.exec(text)?.[1] ?? text.slice(0, 200);
    throw new ApiError(res.status, code, `object storage refused the PUT of ${uri}: ${msg}`, { request: `PUT ${uri}` });
  }
  return `s3://${bucket}/${key}`;
}

