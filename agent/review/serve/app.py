"""The page's routes, on Starlette (an ASGI toolkit served by uvicorn: routing, streaming
responses for server-sent events, files and trusted-host checks come well tested, where a
hand-rolled http.server would have to redo each).

    /                          the tags, with links
    /t/<tag>/                  the live page: the report's panels and what runs now
    /t/<tag>/x/<experiment>    one experiment's view (the report's macro), fetched on a click
    /t/<tag>/live.json         the runs in flight and proposals being written, as JSON
    /t/<tag>/events            the same as server-sent events, when they change (and every 3 s)
    /t/<tag>/files/<path>      a transcript or a run's log or result (agent/review/serve/files.py)

Everything is GET and reads only. Every response says so to the browser: a content security
policy that allows nothing from another origin (the page is offline by construction), no
caching, no referrer, no framing. When the server is bound beyond this machine's loopback, a
token is required on every request (`?token=` once, then a same-site cookie); on loopback,
the Host header must name loopback (a page on another site cannot reach this one through a
DNS name it points at 127.0.0.1).
"""
from __future__ import annotations

import asyncio
import hmac
import html
import json
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (FileResponse, HTMLResponse, JSONResponse, PlainTextResponse,
                                 RedirectResponse, Response, StreamingResponse)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.record.events import Direction
from agent.record.ledger import LEDGER_FILE
from agent.review.serve.files import served_file
from agent.review.serve.tagview import TagView

COOKIE = "nightshift_token"
EVENTS_EVERY_S = 1.0
EVENTS_AT_LEAST_S = 3.0
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
HEADERS = [
    (b"content-security-policy", b"default-src 'none'; script-src 'unsafe-inline'; "
     b"style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
     b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"), (b"x-frame-options", b"DENY"),
]


@dataclass
class Site:
    """The tags a server shows: `tags` (None: every tag of the results folder, found as they
    appear) under `results`, the results folder of one repository."""

    results: Path
    tags: tuple[str, ...] | None = None
    metric: str | None = None
    direction: Direction | None = None
    repo: Path | None = None
    views: dict[str, TagView] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def names(self) -> list[str]:
        if self.tags is not None:
            return list(self.tags)
        if not self.results.is_dir():
            return []
        return sorted(p.parent.name for p in self.results.glob(f"*/{LEDGER_FILE}")
                      if _TAG.fullmatch(p.parent.name))

    def view(self, tag: str) -> TagView | None:
        """The tag's view, or None for a name that is not one of the site's tags."""
        if not _TAG.fullmatch(tag) or (self.tags is not None and tag not in self.tags):
            return None
        folder = self.results / tag
        if not (folder / LEDGER_FILE).is_file():
            return None
        with self._lock:
            if tag not in self.views:
                self.views[tag] = TagView(tag, folder, metric=self.metric, direction=self.direction,
                                          repo=self.repo)
            return self.views[tag]


class Guard:
    """Security headers on every response and, when `token` is set, the token on every
    request (query `token=`, the cookie it sets, or `Authorization: Bearer`)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        from_query = request.query_params.get("token")
        if self.token is not None:
            given = from_query or request.cookies.get(COOKIE) or \
                request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
                refused = PlainTextResponse(
                    "401: this page needs its token. Open the address `nightshift serve` printed "
                    "when it started (it ends in ?token=...).", status_code=401)
                await refused(scope, receive, self._headers(send, cookie=False))
                return
        await self.app(scope, receive, self._headers(send, cookie=bool(self.token and from_query)))

    def _headers(self, send: Send, cookie: bool) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", [])) + HEADERS
                if cookie:
                    headers.append((b"set-cookie", f"{COOKIE}={self.token}; Path=/; HttpOnly; "
                                                   f"SameSite=Strict".encode()))
                message = {**message, "headers": headers}
            await send(message)
        return sending


def make_app(site: Site, *, token: str | None = None,
             allowed_hosts: list[str] | None = None,
             closing: threading.Event | None = None) -> ASGIApp:
    """The ASGI app over `site`. `allowed_hosts`: the Host names accepted (None: any, for a
    server bound beyond loopback, which the token guards instead). `closing`, once set, ends
    the event streams (the server is stopping)."""
    closing = closing or threading.Event()

    def tag_view(request: Request) -> TagView:
        view = site.view(request.path_params["tag"])
        if view is None:
            raise _NotFound(f"no tag {request.path_params['tag']!r} here; see /")
        return view

    async def index(request: Request) -> Response:
        rows = await run_in_threadpool(lambda: [site.view(t).summary() for t in site.names()
                                                if site.view(t) is not None])
        items = "".join(
            f'<li><a href="/t/{html.escape(r["tag"])}/">{html.escape(r["tag"])}</a>: '
            f'{r["experiments"]} experiments, {r["kept"]} kept, {r["runs"]} runs'
            f'{", runs in flight" if r["in_flight"] else ""}</li>' for r in rows)
        return HTMLResponse(
            "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Nightshift</title>"
            "<style>body{font:14px/1.5 -apple-system,Segoe UI,Helvetica,Arial,sans-serif;"
            "margin:32px auto;max-width:720px}</style></head><body><h1>Nightshift</h1>"
            f"<ul>{items or '<li>No tag with a ledger yet.</li>'}</ul>"
            f"<p>Results folder: <code>{html.escape(str(site.results))}</code> · read-only</p>"
            "</body></html>")

    async def to_page(request: Request) -> Response:
        return RedirectResponse(f"/t/{request.path_params['tag']}/", status_code=307)

    async def page(request: Request) -> Response:
        view = tag_view(request)
        rendered = await run_in_threadpool(view.page)
        return HTMLResponse(rendered.html)

    async def experiment(request: Request) -> Response:
        view = tag_view(request)
        found = await run_in_threadpool(view.view, request.path_params["experiment"])
        if found is None:
            return PlainTextResponse("no such experiment on this tag (yet)", status_code=404)
        return HTMLResponse(found)

    async def live(request: Request) -> Response:
        view = tag_view(request)
        return JSONResponse(_finite(await run_in_threadpool(view.live)))

    async def events(request: Request) -> Response:
        view = tag_view(request)

        async def stream():
            last, sent_at = None, 0.0
            loop = asyncio.get_running_loop()
            while not closing.is_set():
                snapshot = _finite(await run_in_threadpool(view.live))
                text = json.dumps({"version": snapshot["version"], "live": snapshot},
                                  allow_nan=False, separators=(",", ":"))
                if text != last or loop.time() - sent_at >= EVENTS_AT_LEAST_S:
                    yield f"data: {text}\n\n"
                    last, sent_at = text, loop.time()
                await asyncio.sleep(EVENTS_EVERY_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def files(request: Request) -> Response:
        view = tag_view(request)
        path = served_file(view.tag_dir, request.path_params["path"])
        if path is None:
            return PlainTextResponse("403: not a file this page serves (only transcripts and "
                                     "runs' logs and results, inside the tag's folder)",
                                     status_code=403)
        kind = "application/json" if path.suffix == ".json" else "text/plain; charset=utf-8"
        return FileResponse(path, media_type=kind)

    async def not_found(request: Request, error: Exception) -> Response:
        return PlainTextResponse(f"404: {error}", status_code=404)

    routes = [Route("/", index), Route("/t/{tag}", to_page), Route("/t/{tag}/", page),
              Route("/t/{tag}/x/{experiment}", experiment), Route("/t/{tag}/live.json", live),
              Route("/t/{tag}/events", events), Route("/t/{tag}/files/{path:path}", files)]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={_NotFound: not_found})
    return Guard(app, token)   # outermost: a refused request reaches nothing else


class _NotFound(LookupError):
    pass


def _finite(value: Any) -> Any:
    """JSON has no NaN: a loss printed as nan is dropped from what the page is sent."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
