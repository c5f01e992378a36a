from __future__ import annotations

import datetime
import hashlib
import hmac
import http.server
import os
import tempfile
import threading
import unittest
import urllib.parse
from typing import Any, Dict, List

from baton import _blob


def reference_signature(method: str, path: str, headers: Dict[str, str], payload: bytes, secret: str,
                        region: str, when: datetime.datetime) -> str:
    """AWS Signature Version 4 as the AWS documentation spells it, step by step."""
    signed = sorted(h for h in headers)
    canonical_headers = "".join(f"{h}:{headers[h].strip()}\n" for h in signed)
    creq = "\n".join([method, path, "", canonical_headers, ";".join(signed), hashlib.sha256(payload).hexdigest()])
    scope = f"{when:%Y%m%d}/{region}/s3/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", f"{when:%Y%m%dT%H%M%SZ}", scope, hashlib.sha256(creq.encode()).hexdigest()])

    def h(k: bytes, m: str) -> bytes:
        return hmac.new(k, m.encode(), hashlib.sha256).digest()
    key = h(h(h(h(("AWS4" + secret).encode(), f"{when:%Y%m%d}"), region), "s3"), "aws4_request")
    return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()


class FileStoreTest(unittest.TestCase):
    def test_put_file_writes_under_the_root_and_names_it_as_the_server_does(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            uri = _blob.put_file("file://" + d, "buffers/ds/t/1/batch-0001.jsonl", b'{"k":1}\n')
            self.assertEqual(uri, "file://" + d + "/buffers/ds/t/1/batch-0001.jsonl")
            with open(os.path.join(d, "buffers", "ds", "t", "1", "batch-0001.jsonl"), "rb") as f:
                self.assertEqual(f.read(), b'{"k":1}\n')
            with self.assertRaises(ValueError):
                _blob.put_file("file://" + d, "../escape", b"")
            with self.assertRaises(ValueError):
                _blob.put_file("s3://bucket", "k", b"")


class S3Test(unittest.TestCase):
    def test_signed_put_reaches_a_path_style_endpoint_with_a_valid_signature(self) -> None:
        got: List[Dict[str, Any]] = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            endpoint = f"http://127.0.0.1:{srv.server_address[1]}"
            uri = "s3://data/baton/buffers/ds/t 1/1/batch-0001.jsonl"
            _blob.put_s3(uri, b'{"k":1}\n', access_key="AKID", secret_key="SECRET", session_token="TOKEN",
                         region="us-east-1", endpoint_url=endpoint)
        finally:
            srv.shutdown()
        req = got[0]
        self.assertEqual(urllib.parse.unquote(req["path"]), "/data/baton/buffers/ds/t 1/1/batch-0001.jsonl")
        self.assertEqual(req["body"], b'{"k":1}\n')
        h = req["headers"]
        auth = h["authorization"]
        self.assertTrue(auth.startswith("AWS4-HMAC-SHA256 Credential=AKID/"))
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
        self.assertEqual(signed, sorted(["content-type", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"]))
        when = datetime.datetime.strptime(h["x-amz-date"], "%Y%m%dT%H%M%SZ")
        want = reference_signature("PUT", req["path"], {k: h[k] for k in signed}, req["body"], "SECRET", "us-east-1", when)
        self.assertEqual(auth.split("Signature=")[1], want)
        self.assertEqual(h["x-amz-security-token"], "TOKEN")


if __name__ == "__main__":
    unittest.main()
