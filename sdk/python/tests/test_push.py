from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
import time
import unittest
from typing import Any, Dict, List, cast

import baton
from baton import push

SECRET = "shh-its-a-secret"
BODY = b'{"taskId":"t-1"}\n'
VECTOR = "v1=949cd577deba4de4fa9cb8117b0afeb450c1749269be9d1e2431856b37f1e758"


def signed(body: bytes = BODY, secret: str = SECRET, ts: int = 0) -> Dict[str, str]:
    ts = ts or int(time.time())
    mac = hmac.new(secret.encode(), str(ts).encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Authorization": "Bearer " + secret, "Baton-Timestamp": str(ts), "Baton-Signature": "v1=" + mac}


class VerifyTest(unittest.TestCase):
    def test_contract_test_vector(self) -> None:
        headers = {"Authorization": "Bearer " + SECRET, "Baton-Timestamp": "1700000000", "Baton-Signature": VECTOR}
        self.assertTrue(push.verify(headers, BODY, SECRET, now=1700000000))
        self.assertTrue(push.verify({k.lower(): v for k, v in headers.items()}, BODY, SECRET, now=1700000100))

    def test_refusals_say_why(self) -> None:
        good = signed()
        cases = [
            ({**good, "Authorization": "Bearer nope"}, BODY, "bearer"),
            ({**good, "Baton-Timestamp": "12x"}, BODY, "decimal"),
            (signed(ts=int(time.time()) - 301), BODY, "tolerance"),
            ({**good, "Baton-Signature": good["Baton-Signature"].upper()}, BODY, "lowercase"),
            (good, BODY + b" ", "wrong Baton-Signature"),
            ({k: v for k, v in good.items() if k != "Baton-Signature"}, BODY, "v1="),
        ]
        for headers, body, why in cases:
            with self.subTest(why=why):
                self.assertFalse(push.verify(headers, body, SECRET))
                with self.assertRaisesRegex(push.PushUnauthorized, why):
                    push.check(headers, body, SECRET)
        self.assertTrue(push.verify(good, BODY, SECRET))
        with self.assertRaises(ValueError):
            push.check(good, BODY, "")

    def test_wsgi_environ_headers(self) -> None:
        environ = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in signed().items()}
        self.assertTrue(push.verify(environ, BODY, SECRET))


def call_wsgi(app: Any, headers: Dict[str, str], body: bytes) -> Any:
    environ = {"REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    got: Dict[str, Any] = {}

    def start_response(status: str, hdrs: List[Any]) -> None:
        got["status"], got["headers"] = status, dict(hdrs)
    got["body"] = b"".join(app(environ, start_response))
    return got


class MiddlewareTest(unittest.TestCase):
    def test_wsgi_middleware(self) -> None:
        seen: List[bytes] = []

        def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            seen.append(environ["wsgi.input"].read())
            start_response("202 Accepted", [])
            return [b"ok"]
        wrapped = push.wsgi_middleware(app, SECRET)
        r = call_wsgi(wrapped, signed(), BODY)
        self.assertEqual((r["status"], seen), ("202 Accepted", [BODY]))
        r = call_wsgi(wrapped, {**signed(), "Authorization": "Bearer x"}, BODY)
        self.assertTrue(r["status"].startswith("401"))
        self.assertEqual(r["headers"]["WWW-Authenticate"], 'Bearer realm="baton-push"')
        self.assertEqual(len(seen), 1)

    def test_asgi_middleware(self) -> None:
        seen: List[bytes] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            msg = await receive()
            seen.append(msg["body"])
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        wrapped = push.asgi_middleware(app, SECRET)

        def run(headers: Dict[str, str]) -> List[Dict[str, Any]]:
            sent: List[Dict[str, Any]] = []
            chunks = [{"type": "http.request", "body": BODY[:5], "more_body": True},
                      {"type": "http.request", "body": BODY[5:], "more_body": False}]

            async def receive() -> Dict[str, Any]:
                return chunks.pop(0)

            async def send(m: Dict[str, Any]) -> None:
                sent.append(m)
            scope = {"type": "http", "method": "POST", "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
            asyncio.run(cast(Any, wrapped(scope, receive, send)))
            return sent
        self.assertEqual(run(signed())[0]["status"], 202)
        self.assertEqual(seen, [BODY])
        self.assertEqual(run({**signed(), "Baton-Timestamp": "1"})[0]["status"], 401)
        self.assertEqual(len(seen), 1)

    def test_push_target_refuses_and_deduplicates(self) -> None:
        target = push.PushTarget(SECRET)
        status, ans = target.accept({"Authorization": "Bearer wrong"}, BODY)
        self.assertEqual(status, 401)
        status, ans = target.accept(signed(b"[1]\n"), b"[1]\n")
        self.assertEqual(status, 400)
        with self.assertRaises(ValueError):
            push.Callbacks({"taskId": "t"})


if __name__ == "__main__":
    unittest.main()
