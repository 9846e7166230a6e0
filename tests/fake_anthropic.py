"""A local fake of the Anthropic Messages API, for driving the real SDK in tests.

`FakeAnthropic` serves HTTP on 127.0.0.1 from a thread. Each POST /v1/messages takes the next
scripted reply (a `Reply`, or a callable `request_json -> Reply` for replies that depend on
the request) and records what it received: path, headers and the raw body bytes. A request
beyond the script gets a 400 `invalid_request_error`, so a test that under-scripts fails
loudly instead of hanging.

    with FakeAnthropic([message([tool_use("submit", {...})])]) as fake:
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-test", max_retries=0)
"""
from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Union

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


Script = Union[Reply, Callable[[dict[str, Any]], Reply]]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input: Any, id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}


def message(
    content: list[dict[str, Any]],
    stop_reason: str | None = None,
    usage: dict[str, int] | None = None,
    model: str = "claude-sonnet-5-5",
) -> Reply:
    """A 200 Messages API answer. stop_reason defaults to tool_use when a tool is called, else
    end_turn; usage defaults to tokens estimated from the request (bytes / 4)."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    body = {
        "id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": None, "usage": usage,
    }
    return Reply(200, body)


def error(status: int, kind: str, text_: str = "", headers: dict[str, str] | None = None) -> Reply:
    """An API error as Anthropic sends it, e.g. error(429, "rate_limit_error"),
    error(529, "overloaded_error")."""
    body = {"type": "error", "error": {"type": kind, "message": text_ or kind.replace("_", " ")}}
    return Reply(status, body, headers or {})


class FakeAnthropic:
    """Plays a script of replies; records every request. Use as a context manager."""

    def __init__(self, script: Iterable[Script] = ()) -> None:
        self.script: deque[Script] = deque(script)
        self.requests: list[RecordedRequest] = []
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

    def __enter__(self) -> "FakeAnthropic":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            item = self.script.popleft() if self.script else None
        if item is None:
            return error(400, "invalid_request_error", "fake server: the script has no reply left")
        reply = item(request.json) if callable(item) else item
        if reply.status == 200 and reply.body.get("usage") is None:
            usage = {"input_tokens": len(request.body) // 4, "output_tokens": 60,
                     "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
            reply = Reply(200, {**reply.body, "usage": usage}, reply.headers)
        return reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: avoid a 40 ms ACK stall

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                if not self.path.startswith("/v1/messages"):
                    reply = error(404, "not_found_error", f"fake server: no route {self.path}")
                else:
                    reply = fake._next_reply(request)
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_fake_{len(fake.requests)}")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

        return Handler
