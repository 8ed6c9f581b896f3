"""The HTTP side: ``/metrics`` and ``/healthz`` on a small threaded server.

The server runs on its own daemon thread and never calls into the agent's loop: a scrape reads
what the registry holds (see :mod:`qosmanager.exporter.registry` for the locking).  It stays
small on purpose:

* at most ``max_clients`` requests are served at once; one more is answered ``503`` at once and
  closed, so a scraper storm cannot pile up threads in a memory-tight agent;
* every connection has a socket timeout, so a client that stalls mid-request frees its thread;
* request logging goes to the debug log, not stderr.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from qosmanager.exporter.registry import CONTENT_TYPE

log = logging.getLogger(__name__)

RenderFn = Callable[[], str]
HealthFn = Callable[..., "tuple[bool, dict[str, Any]]"]  # (liveness: bool = False) -> (ok, body)

BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (every interface) or ``[v6]:port`` -> ``(host, port)``."""
    text = addr.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"--metrics-addr {addr!r}: expected host:port (e.g. 127.0.0.1:9316)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"--metrics-addr {addr!r}: write an IPv6 address in brackets, e.g. [::1]:9316")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--metrics-addr {addr!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--metrics-addr {addr!r}: port {port} is out of range 0..65535")
    return host, port


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    render: RenderFn
    health: HealthFn

    def __init__(self, address: tuple[str, int], render: RenderFn, health: HealthFn,
                 max_clients: int) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.render = render
        self.health = health
        self._slots = threading.BoundedSemaphore(max_clients)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 5.0  # seconds a client may stall; applied to the socket by StreamRequestHandler
    server_version = "qosmanager"

    def do_GET(self) -> None:  # http.server dispatches to do_<METHOD>
        path, _, query = self.path.partition("?")
        if path == "/metrics":
            try:
                body = self.server.render().encode()
            except Exception:  # a broken family must not take the endpoint down with a traceback
                log.exception("rendering /metrics failed")
                self._send(500, "text/plain; charset=utf-8", b"rendering the metrics failed\n")
                return
            self._send(200, CONTENT_TYPE, body)
        elif path == "/healthz":
            try:
                # ?probe=liveness: is this process still doing its work?  A lost API server does not
                # fail it (restarting could not help, and the agent keeps enforcing the last state);
                # plain /healthz (readiness, monitoring) still reports it.
                if "probe=liveness" in query.split("&"):
                    ok, report = self.server.health(liveness=True)
                else:
                    ok, report = self.server.health()
            except Exception as e:
                log.exception("health check failed")
                ok, report = False, {"status": "unhealthy", "error": f"{type(e).__name__}: {e}"}
            self._send(200 if ok else 503, "application/json", (json.dumps(report) + "\n").encode())
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the base class's signature
        log.debug("%s - %s", self.address_string(), format % args)


class MetricsServer:
    """``/metrics`` (``render()``) and ``/healthz`` (``health()``) on ``addr``, on a daemon thread."""

    def __init__(self, addr: str, render: RenderFn, health: HealthFn, *, max_clients: int = 4) -> None:
        self.host, self.port = parse_addr(addr)
        self.render = render
        self.health = health
        self.max_clients = max_clients
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the real port when ``addr`` asked for port 0)."""
        if self._server is None:
            return self.host, self.port
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host or '127.0.0.1'}:{port}"

    def start(self) -> None:
        """Bind and serve; raises OSError when the address cannot be bound."""
        if self._server is not None:
            return
        host = self.host or "0.0.0.0"  # ":9316": every IPv4 interface
        server = _Server((host, self.port), self.render, self.health, self.max_clients)
        self._server = server
        # the poll interval bounds how long stop() waits for the serving loop to notice
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="qosmanager-metrics", daemon=True)
        self._thread.start()
        log.info("serving /metrics and /healthz on %s", self.url)

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=2.0)
