"""The HTTP side: ``/metrics`` and ``/healthz`` on one non-blocking server thread.

Whoever can reach the metrics port (on a pod network: any pod) must not be able to fail the
liveness probe, or they could have the agent restarted forever.  So no client can hold anything
the probe needs:

* one thread and one selector serve every connection; sockets are non-blocking, so no client
  holds a thread, and ``/metrics`` and ``/healthz`` are rendered on that thread (both are
  snapshots of a few milliseconds);
* a connection must deliver its whole request head within ``head_timeout`` (5 s) of being
  accepted, however it paces its bytes (a client sending a byte a second is closed at 5 s), and
  the head may hold at most ``max_head`` bytes (8 KiB; more is answered 431);
* at most ``max_clients`` connections are open; a new connection is always accepted: when the
  table is full the oldest connection still sending its request head is closed (taken from the
  peer address holding the most of them, so a flood from one address evicts its own
  connections first), so idle or slow clients can never lock a probe out;
* a response is written as far as the client takes it and the rest whenever the socket is
  writable again; a client that has not taken all of it ``write_timeout`` (10 s) after it was
  ready is dropped, and meanwhile everyone else is served;
* one request per connection (``Connection: close``);
* ``/metrics`` answers in the format the ``Accept`` header prefers (OpenMetrics 1.0.0 or the text
  format 0.0.4: :func:`~qosmanager.exporter.registry.wants_openmetrics`), gzipped when
  ``Accept-Encoding`` names gzip;
* out of descriptors (``accept`` failing with EMFILE), the oldest connection or, with none, a
  spare descriptor held for the purpose is closed, so the waiting connection is still accepted.

The server holds at most ``max_clients`` + 5 descriptors (connections, the listening socket, the
selector, its wake-up pair, the spare); :func:`descriptor_reserve` adds room for the files a
health check opens, and the agent's descriptor budget keeps that many free.

Request logging goes to the debug log.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import logging
import os
import select
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from qosmanager.exporter.registry import accepts_gzip

log = logging.getLogger(__name__)

# (the request's Accept header) -> (the page, its content type): Registry.expose
ExposeFn = Callable[[str], "tuple[bytes, str]"]
HealthFn = Callable[..., "tuple[bool, dict[str, Any]]"]  # (liveness: bool = False) -> (ok, body)

MAX_CLIENTS = 24
HEAD_TIMEOUT = 5.0
WRITE_TIMEOUT = 10.0
MAX_HEAD = 8192
ACCEPT_BATCH = 16  # connections accepted per wake-up before the open ones are served again
OWN_DESCRIPTORS = 5  # listening socket, selector, wake-up pair, spare
HEALTH_DESCRIPTORS = 3  # files a health check opens (one at a time), with room to spare

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
GZIP_LEVEL = 6  # the agent's ~13 kB page shrinks ~5 times in under a millisecond; 9 costs more for little


def descriptor_reserve(max_clients: int = MAX_CLIENTS) -> int:
    """Descriptors the server may need at once: its connections, its own and a health check's."""
    return max_clients + OWN_DESCRIPTORS + HEALTH_DESCRIPTORS


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


_READING, _WRITING = 0, 1
_WAKE = object()  # selector data of the wake-up socket


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    seq: int  # accept order: the lowest is the oldest
    deadline: float
    state: int = _READING
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None
    closed: bool = False


def _waiting(listener: socket.socket) -> bool:
    """Whether a connection waits to be accepted (``poll`` needs no descriptor, unlike epoll)."""
    p = select.poll()
    p.register(listener, select.POLLIN)
    return bool(p.poll(0))


def _headers(head: bytes) -> dict[str, str]:
    """The request's header fields by lower-case name (repeated fields joined with commas, as
    RFC 9110 reads them); lines that are not ``name: value`` are skipped."""
    out: dict[str, str] = {}
    for raw in head.split(b"\n")[1:]:
        name, sep, value = raw.decode("latin-1").partition(":")
        name = name.strip().lower()
        if not sep or not name or " " in name:
            continue
        value = value.strip()
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _response(code: int, ctype: str, body: bytes, *, head_only: bool = False,
              extra: str = "") -> bytes:
    reason = HTTPStatus(code).phrase
    head = (f"HTTP/1.1 {code} {reason}\r\nServer: qosmanager\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


class MetricsServer:
    """``/metrics`` (``render(accept)``) and ``/healthz`` (``health()``) on ``addr``, on a daemon thread."""

    def __init__(self, addr: str, render: ExposeFn, health: HealthFn, *, max_clients: int = MAX_CLIENTS,
                 head_timeout: float = HEAD_TIMEOUT, write_timeout: float = WRITE_TIMEOUT,
                 max_head: int = MAX_HEAD) -> None:
        if max_clients < 1:
            raise ValueError(f"max_clients must be at least 1, not {max_clients}")
        self.host, self.port = parse_addr(addr)
        self.render = render
        self.health = health
        self.max_clients = max_clients
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout
        self.max_head = max_head
        self._listener: socket.socket | None = None
        self._bound: tuple[str, int] | None = None
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._spare: int | None = None
        self._stopping = False
        self._conns: dict[_Conn, None] = {}  # insertion order == accept order
        self._seq = 0
        self._accept_paused_until = 0.0
        # what happened (read by tests and logs; written on the server thread only)
        self.served = 0
        self.evicted = 0
        self.timed_out = 0

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the real port when ``addr`` asked for port 0)."""
        return self._bound if self._bound is not None else (self.host, self.port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host or '127.0.0.1'}:{port}"

    @property
    def connections(self) -> int:
        return len(self._conns)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Bind and serve; raises OSError when the address cannot be bound."""
        if self._listener is not None:
            return
        host = self.host or "0.0.0.0"  # ":9316": every IPv4 interface
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, self.port))
            listener.listen(128)
            listener.setblocking(False)
            sel = selectors.DefaultSelector()
        except BaseException:
            listener.close()
            raise
        try:
            wake_r, wake_w = socket.socketpair()
        except BaseException:
            sel.close()
            listener.close()
            raise
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        sel.register(listener, selectors.EVENT_READ, None)
        sel.register(wake_r, selectors.EVENT_READ, _WAKE)
        name = listener.getsockname()
        self._bound = (str(name[0]), int(name[1]))
        self._listener, self._sel, self._wake_r, self._wake_w = listener, sel, wake_r, wake_w
        self._stopping = False
        self._take_spare()
        self._thread = threading.Thread(target=self._serve, name="qosmanager-metrics", daemon=True)
        self._thread.start()
        log.info("serving /metrics and /healthz on %s", self.url)

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        thread.join(timeout=5.0)
        if thread.is_alive():  # stuck in a render: at least stop taking connections
            log.warning("the metrics server did not stop within 5 s; closing its socket")
            if self._listener is not None:
                with contextlib.suppress(OSError):
                    self._listener.close()
        self._thread = None
        self._listener = None

    # ------------------------------------------------------------------ the loop
    def _serve(self) -> None:
        sel = self._sel
        assert sel is not None
        try:
            while not self._stopping:
                try:
                    events = sel.select(self._timeout())
                except OSError as e:  # never expected from epoll; do not spin on it
                    log.error("metrics server: select failed: %s", e)
                    time.sleep(0.1)
                    continue
                for key, mask in events:
                    data = key.data
                    if data is None:
                        self._accept()
                    elif data is _WAKE:
                        with contextlib.suppress(OSError):
                            key.fileobj.recv(64)  # type: ignore[union-attr]
                    elif not data.closed:
                        if data.state == _READING and mask & selectors.EVENT_READ:
                            self._read(data)
                        elif data.state == _WRITING and mask & selectors.EVENT_WRITE:
                            self._write(data)
                self._housekeeping()
        except Exception:  # a bug here must not pass silently: health would just time out
            log.exception("the metrics server stopped")
        finally:
            self._shutdown()

    def _timeout(self) -> float | None:
        """Seconds until the loop has something to do without an event; None (sleep until one) when
        idle: no connection, accepting, the spare descriptor held (an idle agent's server never wakes)."""
        if not self._conns and not self._accept_paused_until and self._spare is not None:
            return None
        now = time.monotonic()
        wait = 1.0
        for c in self._conns:
            wait = min(wait, c.deadline - now)
        if self._accept_paused_until:
            wait = min(wait, self._accept_paused_until - now)
        return max(0.0, wait)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        for c in [c for c in self._conns if now >= c.deadline]:
            self.timed_out += 1
            log.debug("%s: %s deadline passed; closing", c.peer,
                      "request" if c.state == _READING else "response")
            self._close(c)
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            assert self._sel is not None and self._listener is not None
            self._sel.register(self._listener, selectors.EVENT_READ, None)
        if self._spare is None:
            self._take_spare()

    def _shutdown(self) -> None:
        for c in list(self._conns):
            self._close(c)
        sel, self._sel = self._sel, None
        if sel is not None:
            sel.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        self._wake_r = self._wake_w = None
        if self._spare is not None:
            with contextlib.suppress(OSError):
                os.close(self._spare)
            self._spare = None

    def _take_spare(self) -> None:
        try:
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._spare = None

    # ------------------------------------------------------------------ connections
    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    # accept wants a descriptor before it looks at the queue: give one up only for a
                    # connection that is really waiting
                    if not _waiting(listener):
                        return
                    if self._free_a_descriptor():
                        continue
                    # nothing of ours to give up: look again shortly instead of spinning
                    log.warning("metrics server: out of descriptors; accepting again in 0.1 s")
                    assert self._sel is not None
                    self._sel.unregister(listener)
                    self._accept_paused_until = time.monotonic() + 0.1
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR):
                    continue
                log.debug("metrics server: accept failed: %s", e)
                return
            self._admit(sock, addr)

    def _free_a_descriptor(self) -> bool:
        if self._conns:
            self._evict()
            return True
        if self._spare is not None:
            with contextlib.suppress(OSError):
                os.close(self._spare)
            self._spare = None
            return True
        return False

    def _admit(self, sock: socket.socket, addr: Any) -> None:
        sock.setblocking(False)
        if len(self._conns) >= self.max_clients:
            self._evict()
        self._seq += 1
        peer = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        conn = _Conn(sock, peer, self._seq, time.monotonic() + self.head_timeout)
        assert self._sel is not None
        try:
            self._sel.register(sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError):
            sock.close()
            return
        self._conns[conn] = None
        self._read(conn)  # the request has often arrived with the connection

    def _evict(self) -> None:
        """Close one connection to make room: the oldest still sending its request, taken from the
        address that holds the most such connections; with none reading, the oldest writing."""
        pool = [c for c in self._conns if c.state == _READING] or list(self._conns)
        if not pool:
            return
        counts = Counter(c.peer for c in pool)
        top = max(counts.values())
        victim = min((c for c in pool if counts[c.peer] == top), key=lambda c: c.seq)
        self.evicted += 1
        log.debug("%s: connection table full (%d); closing its oldest idle connection",
                  victim.peer, self.max_clients)
        self._close(victim)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.pop(conn, None)
        if self._sel is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(self.max_head + 1 - len(conn.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:  # the client went away before finishing its request
            self._close(conn)
            return
        conn.head += data
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            end = conn.head.find(b"\n\n")
        if end < 0 or end > self.max_head:
            if len(conn.head) > self.max_head:
                self._reply(conn, _response(431, TEXT, b"request head too large\n"), "-", 431)
            return
        self._handle(conn, bytes(conn.head[:end]))

    def _handle(self, conn: _Conn, head: bytes) -> None:
        line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._reply(conn, _response(400, TEXT, b"bad request\n"), line[:80], 400)
            return
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            self._reply(conn, _response(405, TEXT, b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n"),
                        line, 405)
            return
        try:
            url = urlsplit(target)
        except ValueError:
            self._reply(conn, _response(400, TEXT, b"bad request target\n"), line, 400)
            return
        code, ctype, body, extra = self._route(url.path, url.query, _headers(head))
        self._reply(conn, _response(code, ctype, body, head_only=(method == "HEAD"), extra=extra), line, code)

    def _route(self, path: str, query: str, headers: dict[str, str]) -> tuple[int, str, bytes, str]:
        if path == "/metrics":
            try:
                body, ctype = self.render(headers.get("accept", ""))
            except Exception:  # a broken family must not take the endpoint down with a traceback
                log.exception("rendering /metrics failed")
                return 500, TEXT, b"rendering the metrics failed\n", ""
            extra = "Vary: Accept, Accept-Encoding\r\n"
            if accepts_gzip(headers.get("accept-encoding", "")):
                body = gzip.compress(body, GZIP_LEVEL, mtime=0)
                extra += "Content-Encoding: gzip\r\n"
            return 200, ctype, body, extra
        if path == "/healthz":
            try:
                # ?probe=liveness: is this process still doing its work?  A lost API server does not
                # fail it (restarting could not help, and the agent keeps enforcing the last state);
                # plain /healthz (readiness, monitoring) still reports it.
                if "probe=liveness" in query.split("&"):
                    ok, report = self.health(liveness=True)
                else:
                    ok, report = self.health()
            except Exception as e:
                log.exception("health check failed")
                ok, report = False, {"status": "unhealthy", "error": f"{type(e).__name__}: {e}"}
            return 200 if ok else 503, JSON, (json.dumps(report) + "\n").encode(), ""
        return 404, TEXT, b"not found: try /metrics or /healthz\n", ""

    def _reply(self, conn: _Conn, payload: bytes, what: str, code: int) -> None:
        log.debug("%s - %s -> %d", conn.peer, what, code)
        self.served += 1
        conn.state = _WRITING
        conn.out = memoryview(payload)
        conn.deadline = time.monotonic() + self.write_timeout
        assert self._sel is not None
        try:
            self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        except (OSError, ValueError, KeyError):
            self._close(conn)
            return
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        out = conn.out
        while out:
            try:
                n = conn.sock.send(out)
            except (BlockingIOError, InterruptedError):
                conn.out = out
                return
            except OSError:
                self._close(conn)
                return
            out = out[n:]
        conn.out = None
        # done: say so, drop whatever else the client sent (unread input would turn the close into
        # a reset that can cost the client the end of its answer), close
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            conn.sock.recv(65536)
        self._close(conn)
