"""The Kubernetes client's HTTP/1.1 (``qosmanager.states.kube.http1``) on raw bytes: a server side that
writes exactly the bytes of a test, in pieces, and a response read from the other end.  The client's
behaviour against a whole API server is in test_kube_client.py and test_kube_source.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from qosmanager.states.kube import http1


@contextmanager
def answered(*pieces: bytes, close: bool = True, method: str = "GET") -> Iterator[http1.Response]:
    """A response read from ``pieces`` written one at a time (each its own send), then the
    connection closed when ``close``."""
    ours, theirs = socket.socketpair()
    fp = ours.makefile("rb")

    def serve() -> None:
        for p in pieces:
            theirs.sendall(p)
        if close:
            theirs.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=serve)
    t.start()
    try:
        yield http1.Response(fp, method)
    finally:
        t.join(10)
        fp.close()
        ours.close()
        theirs.close()


def read_all(resp: http1.Response) -> bytes:
    out = b""
    while data := resp.read1(7):
        out += data
    return out


def test_a_chunked_body_in_pieces_with_extensions_and_trailers() -> None:
    with answered(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n",
                  b"5;name=value\r\nhel", b"lo\r\n", b"1", b"0\r\n, world! 1234567\r\n",
                  b"0\r\nX-Trailer: t\r\n\r\n", close=False) as resp:
        assert (resp.status, resp.reason, resp.chunked, resp.will_close) == (200, "OK", True, False)
        assert resp.headers["content-type"] == resp.getheader("Content-Type") == "application/json"
        assert not resp.isclosed()
        assert read_all(resp) == b"hello, world! 1234567"
        assert resp.isclosed()  # ended properly: the connection can carry the next request


@pytest.mark.parametrize("cut", [b"5\r\nhel", b"5\r\nhello\r\n", b"5\r\nhello", b"5\r\nhello\r\n0\r\n"[:11]])
def test_a_chunked_body_cut_short_is_an_incomplete_read_never_an_end(cut: bytes) -> None:
    # inside a chunk, between two chunks, before a chunk's CRLF, inside the last chunk's size line
    with answered(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", cut) as resp:
        with pytest.raises(http1.IncompleteRead):
            read_all(resp)
        assert not resp.isclosed()


def test_a_content_length_body_read_whole_or_in_part() -> None:
    with answered(b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\n", b"0123", b"456789") as resp:
        assert (resp.status, resp.reason, resp.chunked) == (404, "Not Found", False)
        assert resp.read(4) == b"0123" and not resp.isclosed()
        assert resp.read(1 << 20) == b"456789" and resp.isclosed()
        assert resp.read(5) == b"" and resp.read1() == b""
    with answered(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", b"01234") as resp, \
            pytest.raises(http1.IncompleteRead):
        resp.read(100)
    with answered(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", b"01234") as resp:
        assert resp.read1(100) == b"01234"
        with pytest.raises(http1.IncompleteRead):
            resp.read1(100)


def test_a_body_without_length_ends_with_the_connection() -> None:
    with answered(b"HTTP/1.0 200 OK\r\n\r\n", b"all ", b"of it") as resp:
        assert resp.will_close and not resp.chunked
        assert read_all(resp) == b"all of it" and resp.isclosed()
    with answered(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok") as resp:
        assert resp.will_close and resp.read(10) == b"ok"
    with answered(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n") as resp:
        assert not resp.will_close and resp.isclosed()


def test_interim_answers_folded_and_repeated_headers_and_bodiless_statuses() -> None:
    with answered(b"HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\n", b"HTTP/1.1 201 Created\r\nWarning: one\r\n",
                  b"warning: two\r\nX-Long: first\r\n\tsecond\r\nContent-Length: 0\r\n\r\n") as resp:
        assert resp.status == 201 and "X-A" not in resp.headers
        assert resp.headers.get("WARNING") == "one, two" and resp.headers["x-long"] == "first second"
        assert resp.isclosed()
    with answered(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", close=False) as resp:
        assert resp.isclosed() and resp.read(10) == b""  # 204 has no body, whatever it says
    with answered(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", close=False, method="HEAD") as resp:
        assert resp.isclosed()


@pytest.mark.parametrize("head, error", [
    (b"", http1.RemoteDisconnected),  # the keep-alive race: closed before any answer
    (b"SSH-2.0-OpenSSH\r\n\r\n", http1.ProtocolError),
    (b"HTTP/1.1 2000 OK\r\n\r\n", http1.ProtocolError),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", http1.ProtocolError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", http1.ProtocolError),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (http1.MAX_HEADERS + 1) + b"\r\n", http1.ProtocolError),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * http1.MAX_LINE + b"\r\n\r\n", http1.ProtocolError),
    (b"HTTP/1.1 200 OK\r\nX: y\r\n", http1.IncompleteRead),
])
def test_a_bad_or_missing_head_is_an_error(head: bytes, error: type[Exception]) -> None:
    with pytest.raises(error), answered(head):
        pass


def test_a_remote_disconnect_is_a_connection_reset() -> None:
    assert issubclass(http1.RemoteDisconnected, ConnectionResetError)


def test_a_bad_chunk_is_a_protocol_error() -> None:
    for body in (b"zz\r\n", b"3\r\nabcXY0\r\n\r\n"):
        with answered(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", body) as resp, \
                pytest.raises(http1.ProtocolError):
            read_all(resp)


def test_a_request_as_sent_and_its_answer_on_a_kept_connection() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as f:
            for answer in (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
                           b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"):
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    head += f.readline()
                length = [int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.startswith(b"Content-Length")]
                seen.append(head + (f.read(length[0]) if length else b""))
                conn.sendall(answer)

    t = threading.Thread(target=serve)
    t.start()
    conn = http1.Connection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/api/v1/pods?limit=5", body=None, headers={"User-Agent": "t", "Accept": "a/b"})
        first = conn.getresponse()
        assert first.read(10) == b"hi" and first.isclosed()
        conn.request("POST", "/x", body=b'{"a":1}', headers={"Content-Type": "application/json"})
        second = conn.getresponse()
        assert second.status == 201 and second.read(10) == b"abc"
    finally:
        conn.close()
        t.join(10)
        server.close()
    assert seen[0] == (f"GET /api/v1/pods?limit=5 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept-Encoding: identity\r\n"
                       "User-Agent: t\r\nAccept: a/b\r\n\r\n").encode()
    assert seen[1].startswith(b"POST /x HTTP/1.1\r\n") and seen[1].endswith(
        b"Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}")


def test_a_header_value_with_a_line_break_is_refused_unsent() -> None:
    conn = http1.Connection("127.0.0.1", 1, timeout=1)
    conn.sock = socket.socket()  # never connected: nothing may be sent
    try:
        with pytest.raises(ValueError, match="CR or LF"):
            conn.request("GET", "/", body=None, headers={"Authorization": "Bearer x\r\nX-Evil: 1"})
    finally:
        conn.sock.close()


def test_the_host_header_and_the_names_given_to_the_resolver() -> None:
    assert http1.Connection("::1", 443, timeout=1, context=None)._host_header == "[::1]:443"
    assert http1.Connection("api.example", 80, timeout=1)._host_header == "api.example"
    assert http1.ascii_host("10.96.0.1") == b"10.96.0.1"
    assert http1.ascii_host("bücher.example") == b"xn--bcher-kva.example"
