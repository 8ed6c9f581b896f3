"""The metrics server answers probes whatever other clients do.

Idle connections, slow-loris clients, clients that never read their answer and bursts of scrapers
must neither make the liveness probe fail nor stall it: every probe here runs with a client
timeout of a few seconds (a kubelet probe's timeout is 1 s by default; the loopback answers in
milliseconds, so the margin is for a loaded test machine), and must get 200.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from qosmanager.exporter import MetricsServer
from qosmanager.exporter.server import GZIP_LEVEL, MAX_CLIENTS

PROBE_TIMEOUT = 3.0


def request(server: MetricsServer, path: str, *, method: str = "GET", timeout: float = PROBE_TIMEOUT,
            source: str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def probe(server: MetricsServer) -> int:
    code, _, body = request(server, "/healthz?probe=liveness")
    assert json.loads(body)["probe"] == "liveness"
    return code


def health(liveness: bool = False) -> tuple[bool, dict[str, Any]]:
    body: dict[str, Any] = {"status": "ok", "checks": {}}
    if liveness:
        body["probe"] = "liveness"
    return True, body


def text(page: str) -> Any:
    """An exposition function that answers ``page`` whatever the client accepts."""
    return lambda accept: (page.encode(), "text/plain; version=0.0.4; charset=utf-8")


UP = text("up 1\n")


@contextlib.contextmanager
def serving(render: Any = UP, **kw: Any) -> Iterator[MetricsServer]:
    server = MetricsServer("127.0.0.1:0", render, health, **kw)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: MetricsServer, source: str | None = None) -> socket.socket:
    s = socket.create_connection(server.address, timeout=PROBE_TIMEOUT,
                                 source_address=(source, 0) if source else None)
    return s


def closed_by_server(s: socket.socket, within: float = 10.0) -> bool:
    """True once the server has closed ``s`` (EOF or reset), False if it is still open after ``within``."""
    s.settimeout(within)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def wait_for(cond: Any, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("n_idle", [4, 16, 200])
def test_idle_connections_never_fail_the_liveness_probe(n_idle: int) -> None:
    """Four idle connections were enough to make every probe answer 503 with the threaded server."""
    with serving() as server:
        idle = [connect(server) for _ in range(n_idle)]
        try:
            for _ in range(3):
                assert probe(server) == 200
            assert request(server, "/metrics")[0] == 200
            # the table never holds more than its cap: the oldest idle ones made room
            assert server.connections <= MAX_CLIENTS
            if n_idle >= MAX_CLIENTS:
                assert server.evicted >= n_idle - MAX_CLIENTS + 1
                assert closed_by_server(idle[0])
        finally:
            for s in idle:
                s.close()


def test_a_full_table_closes_the_oldest_idle_connection_instead_of_refusing() -> None:
    with serving(max_clients=1) as server:
        idle = connect(server)
        assert wait_for(lambda: server.connections == 1)
        assert probe(server) == 200
        assert closed_by_server(idle)
        assert server.evicted == 1
        # sequential requests all fit in the one slot
        assert [probe(server) for _ in range(3)] == [200, 200, 200]


def test_a_flood_from_one_address_evicts_its_own_connections_first() -> None:
    """The probe's address keeps its connection while another address opens more than the cap."""
    with serving(max_clients=4) as server:
        mine = connect(server, source="127.0.0.1")
        assert wait_for(lambda: server.connections == 1)
        flood = []
        for i in range(12):
            flood.append(connect(server, source="127.0.0.2"))
            assert wait_for(lambda i=i: server.evicted >= max(0, i - 2))
        try:
            assert server.evicted == 9
            # the oldest connection of all is still open and gets its answer
            mine.sendall(b"GET /healthz?probe=liveness HTTP/1.1\r\nHost: x\r\n\r\n")
            mine.settimeout(PROBE_TIMEOUT)
            answer = b""
            while chunk := mine.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["probe"] == "liveness"
            assert closed_by_server(flood[0])
        finally:
            mine.close()
            for s in flood:
                s.close()


def test_slow_loris_clients_are_cut_at_the_head_deadline_and_never_block_probes() -> None:
    """Clients sending a header byte a second: probes answer throughout, and each slow client is
    closed at the head deadline although it never stops sending."""
    stop = threading.Event()
    outcome: list[str] = []

    def loris(s: socket.socket) -> None:
        try:
            s.sendall(b"GET /healthz?probe=liveness HTTP/1.1\r\n")
            for _ in range(60):  # a minute of bytes, if the server let it
                if stop.wait(1.0):
                    outcome.append("stopped")
                    return
                s.sendall(b"X")
            outcome.append("never closed")
        except OSError:
            outcome.append("closed by server")

    with serving(head_timeout=2.0) as server:
        socks = [connect(server) for _ in range(40)]
        threads = [threading.Thread(target=loris, args=(s,), daemon=True) for s in socks]
        for th in threads:
            th.start()
        try:
            for _ in range(6):
                assert probe(server) == 200
                time.sleep(0.5)
            assert wait_for(lambda: len(outcome) == len(socks), within=20)
            assert outcome == ["closed by server"] * len(socks)
            assert server.timed_out + server.evicted >= len(socks)
        finally:
            stop.set()
            for s in socks:
                s.close()
            for th in threads:
                th.join(5)


def test_a_client_that_never_reads_its_answer_blocks_nobody() -> None:
    big = "x 1\n" * 2_000_000  # 8 MB: far more than the socket buffers take
    with serving(render=text(big), write_timeout=1.5) as server:
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: no autotuning
        stuck.connect(server.address)
        stuck.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # and never reads
        try:
            assert wait_for(lambda: server.served == 1)
            assert probe(server) == 200
            code, _, body = request(server, "/metrics", timeout=30)
            assert code == 200 and len(body) == len(big)
            # the stalled answer is dropped at its deadline
            assert wait_for(lambda: server.timed_out == 1)
            assert wait_for(lambda: server.connections == 0)
        finally:
            stuck.close()


def test_concurrent_scrapers_all_get_their_answers() -> None:
    page = "".join(f"m{i} {i}\n" for i in range(5000))
    results: list[tuple[str, int, bytes]] = []
    lock = threading.Lock()

    def scraper() -> None:
        for path in ("/metrics", "/healthz", "/metrics", "/healthz?probe=liveness"):
            code, _, body = request(server, path, timeout=30)
            with lock:
                results.append((path, code, body))

    with serving(render=text(page)) as server:
        threads = [threading.Thread(target=scraper) for _ in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert len(results) == 16 * 4
        assert all(code == 200 for _, code, _ in results)
        assert [body for path, _, body in results if path == "/metrics"] == [page.encode()] * 32
        assert all(json.loads(body)["status"] == "ok" for path, _, body in results if path != "/metrics")
        assert server.evicted == 0


def test_protocol_edges() -> None:
    with serving(max_head=1024) as server:
        code, headers, body = request(server, "/metrics", method="HEAD")
        assert code == 200 and body == b"" and int(headers["Content-Length"]) == len("up 1\n")
        code, headers, _ = request(server, "/healthz", method="POST")
        assert code == 405 and headers["Allow"] == "GET, HEAD"
        assert request(server, "/nothing")[0] == 404
        assert request(server, "http://example/metrics")[0] == 200  # absolute form
        s = connect(server)
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Long: " + b"a" * 2000)
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 431 ")
        s.close()
        s = connect(server)
        s.sendall(b"nonsense\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 400 ")
        s.close()
        assert probe(server) == 200


def test_the_accept_header_reaches_the_exposition_and_gzip_follows_accept_encoding() -> None:
    """The server hands the request's Accept header (repeated fields joined, any case) to the
    exposition function and sends its content type; Accept-Encoding: gzip gets the same page gzipped
    (Content-Length of the gzipped bytes, HEAD included); without it, the page as it is."""
    seen: list[str] = []
    page = "".join(f'koordlet_resource_update_duration_milliseconds_bucket{{le="{i}"}} {i}.0\n'
                   for i in range(2000))

    def expose(accept: str) -> tuple[bytes, str]:
        seen.append(accept)
        return page.encode(), "application/x-test"

    with serving(render=expose) as server:
        s = connect(server)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nACCEPT: a/b;q=0.5\r\naccept: c/d\r\n\r\n")
        assert recv_all(s).split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
        s.close()
        assert seen == ["a/b;q=0.5, c/d"]
        code, headers, body = request(server, "/metrics")  # http.client says Accept-Encoding: identity
        assert code == 200 and body == page.encode() and "Content-Encoding" not in headers
        assert headers["Content-Type"] == "application/x-test" and "Accept-Encoding" in headers["Vary"]
        code, headers, body = request(server, "/metrics", headers={"Accept-Encoding": "deflate, gzip"})
        assert code == 200 and headers["Content-Encoding"] == "gzip"
        assert int(headers["Content-Length"]) == len(body) < len(page) // 4
        assert gzip.decompress(body) == page.encode()
        code, headers, body = request(server, "/metrics", method="HEAD", headers={"Accept-Encoding": "gzip"})
        assert code == 200 and body == b"" and headers["Content-Encoding"] == "gzip"
        assert int(headers["Content-Length"]) == len(gzip.compress(page.encode(), GZIP_LEVEL, mtime=0))
        code, headers, body = request(server, "/healthz", headers={"Accept-Encoding": "gzip"})
        assert code == 200 and "Content-Encoding" not in headers and json.loads(body)["status"] == "ok"
        assert probe(server) == 200


def recv_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_a_broken_health_function_answers_503_and_the_server_goes_on() -> None:
    calls = []

    def bad_health(liveness: bool = False) -> tuple[bool, dict[str, Any]]:
        calls.append(liveness)
        raise RuntimeError("boom")

    def bad_render(accept: str) -> tuple[bytes, str]:
        raise ValueError("bad family")

    server = MetricsServer("127.0.0.1:0", bad_render, bad_health)
    server.start()
    try:
        code, _, body = request(server, "/healthz?probe=liveness")
        assert code == 503 and json.loads(body)["error"] == "RuntimeError: boom"
        assert request(server, "/metrics")[0] == 500
        assert calls == [True]
        code, _, _ = request(server, "/healthz")
        assert code == 503 and calls == [True, False]
    finally:
        server.stop()


def test_stop_closes_every_connection_and_the_port() -> None:
    with serving() as server:
        idle = [connect(server) for _ in range(3)]
        assert wait_for(lambda: server.connections == 3)
        server.stop()
        assert all(closed_by_server(s) for s in idle)
        with pytest.raises(OSError):
            request(server, "/healthz")
        for s in idle:
            s.close()
    with pytest.raises(ValueError, match="max_clients"):
        MetricsServer("127.0.0.1:0", str, health, max_clients=0)


def _switches(tid: int) -> int:
    """Context switches of thread ``tid`` so far (voluntary: each wake-up from a sleep)."""
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))


def test_an_idle_server_never_wakes() -> None:
    """An agent's server with no client sleeps until one comes (its thread counts in the agent's CPU:
    it woke once a second before); a connection still gets its deadlines."""
    with serving() as server:
        assert probe(server) == 200
        thread = server._thread
        assert thread is not None and thread.native_id is not None
        assert wait_for(lambda: server.connections == 0)
        time.sleep(0.2)  # the loop is back in its select
        before = _switches(thread.native_id)
        time.sleep(2.5)
        assert _switches(thread.native_id) == before
        assert probe(server) == 200  # and wakes for a client at once
