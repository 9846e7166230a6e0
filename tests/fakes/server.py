"""The HTTP side of the fakes: a threaded server on 127.0.0.1 that plays a script of replies.

Each POST takes the next scripted item: a `Reply`, or a callable `request_json -> Reply` for
answers that depend on what was asked. Before a scripted item is used the subclass's
`validate(request)` may refuse the request (the API's 400), and a reply may carry `delay_s`
to outlast the client's timeout. A request beyond the script is refused with a 400, so a
test that under-scripts fails loudly instead of hanging.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Union


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0          # wait this long before answering (a timeout, seen by the client)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0               # what the fake answered

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


Script = Union[Reply, Callable[[dict[str, Any]], Reply]]


class FakeServer:
    """Plays a script of replies; records every request. Use as a context manager."""

    def __init__(self, script: Iterable[Script] = ()) -> None:
        self.script: deque[Script] = deque(script)
        self.requests: list[RecordedRequest] = []
        self.rejections: list[str] = []     # the 400s a strict fake sent, with why
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def push(self, *replies: Script) -> None:
        with self._lock:
            self.script.extend(replies)

    def __enter__(self) -> "FakeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- for subclasses -------------------------------------------------------------------
    def route(self, path: str) -> bool:
        """Whether `path` is an endpoint of this API."""
        return True

    def validate(self, request: RecordedRequest) -> Reply | None:
        """A refusal of a request the real API would not accept, or None."""
        return None

    def complete(self, request: RecordedRequest, reply: Reply) -> Reply:
        """Fill in what the script left out (usage, ...)."""
        return reply

    def not_found(self, path: str) -> Reply:
        return Reply(404, {"error": f"fake server: no route {path}"})

    def script_exhausted(self) -> Reply:
        return Reply(400, {"error": "fake server: the script has no reply left"})

    # ---- serving --------------------------------------------------------------------------
    def _answer(self, request: RecordedRequest) -> Reply:
        if not self.route(request.path):
            return self.not_found(request.path)
        refusal = self.validate(request)
        if refusal is not None:
            with self._lock:
                self.rejections.append(json.dumps(refusal.body)[:500])
            return refusal
        with self._lock:
            item = self.script.popleft() if self.script else None
        if item is None:
            return self.script_exhausted()
        reply = item(request.json) if callable(item) else item
        return self.complete(request, reply) if reply.status == 200 else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: avoid a 40 ms ACK stall

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = RecordedRequest("POST", self.path, headers, body)
                reply = fake._answer(request)
                with fake._lock:
                    fake.requests.append(RecordedRequest("POST", self.path, headers, body, reply.status))
                    number = len(fake.requests)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.send_header("request-id", f"req_fake_{number}")
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout); nothing to answer

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

        return Handler
