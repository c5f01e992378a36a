"""Writing batch files to the server's object storage: a file:// directory directly, an s3://
bucket with a SigV4-signed PUT (standard library only)."""
from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import os
import ssl
import tempfile
import urllib.parse
from typing import Dict, Mapping, Optional, Tuple

from .errors import APIError, TransportError

__all__ = ["put_file", "put_s3", "sigv4_headers", "split_s3"]


def file_root(blob_url: str) -> str:
    """The directory of a file:// URL (file:///abs/dir, or file://rel/dir relative to the
    working directory)."""
    u = urllib.parse.urlsplit(blob_url)
    if u.scheme != "file":
        raise ValueError(f"baton: {blob_url!r} is not a file:// URL")
    path = urllib.parse.unquote((u.netloc or "") + u.path)
    if not path:
        raise ValueError(f"baton: {blob_url!r} names no directory")
    return os.path.abspath(path)


def put_file(blob_url: str, key: str, data: bytes) -> str:
    """Writes data at key under the file:// store's directory (atomically, by a rename) and
    returns its URI, as the server names it: file:///abs/dir/KEY."""
    root = file_root(blob_url)
    if key.startswith("/") or ".." in key.split("/"):
        raise ValueError(f"baton: bad object key {key!r}")
    path = os.path.join(root, *key.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return "file://" + urllib.parse.quote(root.rstrip("/") + "/" + key, safe="/:@-._~")


def split_s3(uri: str) -> Tuple[str, str]:
    """(bucket, key) of an s3://bucket/key URI."""
    u = urllib.parse.urlsplit(uri)
    if u.scheme != "s3" or not u.netloc:
        raise ValueError(f"baton: {uri!r} is not an s3://bucket/key URI")
    return u.netloc, u.path.lstrip("/")


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def sigv4_headers(method: str, host: str, path: str, region: str, access_key: str, secret_key: str,
                  session_token: Optional[str], payload: bytes, headers: Optional[Mapping[str, str]] = None,
                  now: Optional[datetime.datetime] = None, service: str = "s3") -> Dict[str, str]:
    """The headers of an AWS Signature Version 4 request (path already URI-encoded, no query)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(payload).hexdigest()
    hdrs = {k.lower(): str(v).strip() for k, v in (headers or {}).items()}
    hdrs.update({"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash})
    if session_token:
        hdrs["x-amz-security-token"] = session_token
    signed = sorted(hdrs)
    canonical = "\n".join([method, path, "", "".join(f"{k}:{hdrs[k]}\n" for k in signed), ";".join(signed), payload_hash])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    k = _sign(("AWS4" + secret_key).encode("utf-8"), date)
    k = _sign(_sign(_sign(k, region), service), "aws4_request")
    signature = hmac.new(k, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    out = {name: value for name, value in hdrs.items() if name != "host"}
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                            f"SignedHeaders={';'.join(signed)}, Signature={signature}")
    return out


def put_s3(uri: str, data: bytes, *, access_key: str, secret_key: str, session_token: Optional[str], region: str,
           endpoint_url: Optional[str] = None, content_type: str = "application/jsonl", timeout: float = 60.0) -> str:
    """PUTs data at s3://bucket/key with SigV4; path-style on a custom endpoint (MinIO and the
    like), virtual-host style on AWS. Returns the URI."""
    bucket, key = split_s3(uri)
    if not key:
        raise ValueError(f"baton: {uri!r} names no object key")
    region = region or "us-east-1"
    if endpoint_url:
        e = urllib.parse.urlsplit(endpoint_url)
        scheme, host = e.scheme or "https", e.netloc
        path = (e.path.rstrip("/") + "/" + bucket + "/" + key)
    else:
        scheme, host = "https", f"{bucket}.s3.{region}.amazonaws.com"
        path = "/" + key
    path = urllib.parse.quote(path, safe="/-_.~")
    headers = sigv4_headers("PUT", host, path, region, access_key, secret_key, session_token, data,
                            {"content-type": content_type})
    headers["Content-Length"] = str(len(data))
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request("PUT", path, body=data, headers=headers)
        res = conn.getresponse()
        body = res.read()
    except (OSError, http.client.HTTPException) as err:
        raise TransportError("PUT", uri, err) from err
    finally:
        conn.close()
    if res.status // 100 != 2:
        raise APIError(res.status, "s3_error", body.decode("utf-8", "replace")[:300], body, method="PUT", path=uri)
    return uri
