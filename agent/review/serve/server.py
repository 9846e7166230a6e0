"""Serving the page: the socket, the token, uvicorn in this thread or beside a night.

The address is 127.0.0.1 unless `host` says otherwise. Any other address (another loopback
address included: the token is what makes a page safe to reach from elsewhere) gets a fresh
random token, required on every request and printed in the address at start. The socket is
bound before anything else happens, so a taken port is an error at once, not a thread that
died later; port 0 takes any free port (the address printed says which).
"""
from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
from dataclasses import dataclass, field

from agent.review.serve.app import Site, make_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class ServeError(RuntimeError):
    """The server cannot start (the port is taken, the address is not this machine's)."""


def needs_token(host: str) -> bool:
    return host not in LOOPBACK_NAMES


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or ServeError naming the fix."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET   # a name: localhost
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        hint = (f"port {port} is taken: pass --port 0 for any free port, or another port"
                if error.errno in (98, 48) else f"cannot listen on {host}:{port} ({error.strerror}); "
                "pass an address of this machine with --host")
        raise ServeError(hint) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


@dataclass
class Serving:
    """A server that is listening: its address, its token (None on loopback), and stop()."""

    url: str
    token: str | None
    host: str
    port: int
    _server: object = field(repr=False)
    _sock: socket.socket = field(repr=False)
    _closing: threading.Event = field(repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def run(self) -> None:
        """Serve in this thread until Ctrl-C (uvicorn handles the signal)."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._closing.set()
            self._sock.close()

    def start_in_thread(self) -> "Serving":
        """Serve from a daemon thread (beside a night); stop() ends it."""
        self._thread = threading.Thread(target=self.run, name="nightshift-serve", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the server (and its event streams); closes the socket of one never started."""
        self._closing.set()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._sock.close()


def prepare(site: Site, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> Serving:
    """Bind and build the server for `site` (nothing is served until run/start_in_thread)."""
    import uvicorn

    sock = bind(host, port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(24) if needs_token(host) else None
    closing = threading.Event()
    allowed = None if token else ["127.0.0.1", "localhost", "::1", "[::1]"]
    app = make_app(site, token=token, allowed_hosts=allowed, closing=closing)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=2, server_header=False, proxy_headers=False)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    return Serving(url=url, token=token, host=host, port=port, _server=uvicorn.Server(config),
                   _sock=sock, _closing=closing)
