"""The peers the tests put around a real Herald: an SMS provider speaking Herald's
JSON protocol, and a proxy in front of Herald that can answer 503/429 or drop a
connection before passing requests on. Both are plain HTTP servers in threads of
the test process."""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class Sms:
    to: str
    body: str
    idempotency_key: str | None


class FakeSms:
    """`POST /sms` as DESIGN §5 has it: `{"to", "body", …}` in, `{"id"}` out; a
    number in `refused` gets `400 {"error": "invalid_destination"}`, a
    permanent failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refused: set[str] = set()
        self._received: list[Sms] = []
        fake = self

        class Handler(_Quiet):
            def do_POST(self) -> None:
                message = json.loads(self.body())
                sms = Sms(message["to"], message["body"], self.headers.get("idempotency-key"))
                with fake._lock:
                    fake._received.append(sms)
                    refused = sms.to in fake._refused
                    number = len(fake._received)
                if refused:
                    self.answer(400, b'{"error": "invalid_destination"}', {"content-type": "application/json"})
                else:
                    self.answer(200, json.dumps({"id": f"msg-{number}"}).encode(), {"content-type": "application/json"})

        self._server = _Server(Handler)
        self.url = f"http://127.0.0.1:{self._server.port}/sms"

    def refuse(self, number: str) -> None:
        with self._lock:
            self._refused.add(number)

    def accept(self, number: str) -> None:
        with self._lock:
            self._refused.discard(number)

    def sent_to(self, number: str) -> list[Sms]:
        with self._lock:
            return [sms for sms in self._received if sms.to == number]

    def stop(self) -> None:
        self._server.stop()


@dataclass(frozen=True)
class Fault:
    """What the proxy does to one request instead of passing it on: answer
    `status` (with `retry_after`), or, with `status` None, close the connection
    without answering."""

    status: int | None
    retry_after: str | None = None


class FlakyProxy:
    """A proxy in front of Herald. Each request takes the next planned fault, if
    any; the others pass through unchanged. `seen` lists every request's method
    and path, faulted or not."""

    def __init__(self, upstream_port: int) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._seen: list[tuple[str, str]] = []
        proxy = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                self.relay()

            def do_POST(self) -> None:
                self.relay()

            def do_PUT(self) -> None:
                self.relay()

            def do_DELETE(self) -> None:
                self.relay()

            def relay(self) -> None:
                body = self.body()
                with proxy._lock:
                    proxy._seen.append((self.command, self.path.split("?")[0]))
                    fault = proxy._faults.pop(0) if proxy._faults else None
                if fault is not None:
                    if fault.status is None:
                        self.close_connection = True  # nothing written: the client sees no answer
                        return
                    headers = {"content-type": "text/plain"}
                    if fault.retry_after is not None:
                        headers["retry-after"] = fault.retry_after
                    self.answer(fault.status, b"try again later", headers)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                try:
                    forwarded = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    upstream.request(self.command, self.path, body=body or None, headers=forwarded)
                    response = upstream.getresponse()
                    payload = response.read()
                    kept = {
                        k: v
                        for k, v in response.getheaders()
                        if k.lower() not in ("content-length", "transfer-encoding", "connection")
                    }
                    self.answer(response.status, payload, kept)
                finally:
                    upstream.close()

        self._server = _Server(Handler)
        self.url = f"http://127.0.0.1:{self._server.port}"

    def fail_next(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def seen(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._seen)

    def stop(self) -> None:
        self._server.stop()
