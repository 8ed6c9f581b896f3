"""HTTP/1.1 on one socket: what the Kubernetes client needs of it, and nothing more.

The standard library's ``http.client`` parses headers with the ``email`` package (with ``calendar``,
``quopri``, ``base64`` ...): about 1 MiB of the agent's resident memory for a few header lines.  This
module speaks the same protocol for the client's requests:

* a request is its line, ``Host``, the given headers, ``Accept-Encoding: identity`` and, with a body,
  ``Content-Length``; header values holding CR or LF are refused (no header injection);
* a response is its status line (``1xx`` interim answers skipped), at most :data:`MAX_HEADERS` header
  lines of at most :data:`MAX_LINE` bytes (folded lines joined), then a body framed by
  ``Transfer-Encoding: chunked`` (extensions and trailers skipped), by ``Content-Length``, or by the
  end of the connection (``1xx``, ``204`` and ``304`` have none);
* :meth:`Response.read1` returns what one receive brought (a watch's events as they come); a body cut
  short -- the connection ending inside a chunk or before the last one -- raises
  :class:`IncompleteRead`, never passes for a proper end;
* a connection the server had closed before answering raises :class:`RemoteDisconnected` (the
  keep-alive race the client retries once).

Host names are given to the resolver and to TLS as ASCII bytes, so the ``idna`` codec (and
``unicodedata``) is loaded only for a host name that is not ASCII.
"""

from __future__ import annotations

import io
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

MAX_LINE = 65536  # bytes of a status, header or chunk-size line
MAX_HEADERS = 100
NO_BODY = (204, 304)


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.x as this client reads it."""


class RemoteDisconnected(ConnectionResetError, ProtocolError):
    """The server closed the connection before it sent a status line."""


class IncompleteRead(ProtocolError):
    """The connection ended inside a body."""


class Headers(dict[str, str]):
    """Response headers by lower-case name; a repeated header's values joined with ``", "``."""

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


def ascii_host(host: str) -> bytes:
    """``host`` as the resolver and TLS take it; IDNA only for a name that is not ASCII."""
    try:
        return host.encode("ascii")
    except UnicodeEncodeError:
        return host.encode("idna")


class Response:
    """One response: status, reason, headers, and a body read with :meth:`read` or :meth:`read1`."""

    def __init__(self, fp: io.BufferedReader, method: str) -> None:
        self._fp = fp
        self.status, self.reason, version = self._status_line()
        while 100 <= self.status < 200 and self.status != 101:  # interim answers (100 Continue)
            self._headers()
            self.status, self.reason, version = self._status_line()
        self.headers = self._headers()
        conn = (self.headers.get("connection") or "").lower()
        self.will_close = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
        coding = (self.headers.get("transfer-encoding") or "").lower()
        self.chunked = coding.rsplit(",", 1)[-1].strip() == "chunked"
        self._left: int | None = None  # bytes left of the body (Content-Length) or of the chunk
        self._done = False
        if method == "HEAD" or self.status in NO_BODY:
            self._done = True
        elif not self.chunked:
            length = self.headers.get("content-length")
            if length is not None:
                if not length.strip().isdigit():
                    raise ProtocolError(f"bad Content-Length {length[:40]!r}")
                self._left = int(length)
                self._done = self._left == 0
            else:
                self.will_close = True  # the body ends with the connection

    # ------------------------------------------------------------------ head
    def _line(self) -> bytes:
        line = self._fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise ProtocolError(f"a line longer than {MAX_LINE} bytes")
        return line

    def _status_line(self) -> tuple[int, str, str]:
        line = self._line()
        if not line:
            raise RemoteDisconnected("the server closed the connection without answering")
        parts = line.decode("iso-8859-1").rstrip("\r\n").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (
                len(parts[1]) == 3 and parts[1].isdigit() and parts[1][0] != "0"):
            raise ProtocolError(f"bad status line {line[:100]!r}")
        return int(parts[1]), parts[2] if len(parts) > 2 else "", parts[0]

    def _headers(self) -> Headers:
        headers = Headers()
        last = ""
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return headers
            if not line:
                raise IncompleteRead("the connection ended inside the headers")
            text = line.decode("iso-8859-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and last:  # a folded line continues the last header
                dict.__setitem__(headers, last, f"{dict.__getitem__(headers, last)} {text.strip()}")
                continue
            name, sep, value = text.partition(":")
            if not sep or not name or name != name.strip():
                raise ProtocolError(f"bad header line {line[:100]!r}")
            last = name.lower()
            value = value.strip()
            old = dict.get(headers, last)
            dict.__setitem__(headers, last, value if old is None else f"{old}, {value}")
        raise ProtocolError(f"more than {MAX_HEADERS} header lines")

    # ------------------------------------------------------------------ body
    def isclosed(self) -> bool:
        """Whether the body has been read to its proper end."""
        return self._done

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    def _chunk_size(self) -> int:
        line = self._line()
        if not line.endswith(b"\n"):  # nothing, or a size line cut short
            raise IncompleteRead("the connection ended before the last chunk")
        size = line.split(b";", 1)[0].strip()
        try:
            n = int(size, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size line {line[:100]!r}") from None
        if n < 0:
            raise ProtocolError(f"bad chunk size line {line[:100]!r}")
        if n == 0:  # the last chunk: skip the trailers up to the blank line
            for _ in range(MAX_HEADERS + 1):
                trailer = self._line()
                if trailer in (b"\r\n", b"\n", b""):
                    break
            else:
                raise ProtocolError(f"more than {MAX_HEADERS} trailer lines")
        return n

    def read1(self, n: int = 1 << 16) -> bytes:
        """Up to ``n`` bytes of the body, as one receive brings them; ``b""`` at its proper end."""
        if self._done or n <= 0:
            return b""
        if self.chunked and not self._left:
            self._left = self._chunk_size()
            if not self._left:
                self._done = True
                return b""
        want = n if self._left is None else min(n, self._left)
        data = self._fp.read1(want)
        if self._left is None:  # until the connection ends
            if not data:
                self._done = True
            return data
        if not data:
            raise IncompleteRead(f"the connection ended with {self._left} bytes of the body unread")
        self._left -= len(data)
        if not self._left:
            if self.chunked:
                end = self._fp.read(2)
                if len(end) < 2:
                    raise IncompleteRead("the connection ended after a chunk's data")
                if end != b"\r\n":
                    raise ProtocolError(f"a chunk ended by {end!r}, not CRLF")
            else:
                self._done = True
        return data

    def read(self, amt: int) -> bytes:
        """The body, at most ``amt`` bytes of it (less only at its end)."""
        if not self.chunked and self._left is not None and not self._done:  # one allocation
            want = min(amt, self._left)
            data = self._fp.read(want)
            if len(data) < want:
                raise IncompleteRead(f"the connection ended with {self._left - len(data)} bytes of the body "
                                     "unread")
            self._left -= len(data)
            self._done = not self._left
            return data
        parts: list[bytes] = []
        got = 0
        while got < amt and (part := self.read1(min(amt - got, 1 << 20))):
            parts.append(part)
            got += len(part)
        return b"".join(parts)


class Connection:
    """One keep-alive HTTP/1.1 connection (plain or TLS); one request at a time."""

    def __init__(self, host: str, port: int | None, *, timeout: float,
                 context: ssl.SSLContext | None = None, server_name: str | None = None) -> None:
        self.host = host
        self.port = port or (443 if context is not None else 80)
        self.timeout = timeout
        self._context = context
        self._server_name = server_name or host
        default = 443 if context is not None else 80
        name = f"[{host}]" if ":" in host else host
        self._host_header = name if self.port == default else f"{name}:{self.port}"
        self.sock: socket.socket | None = None
        self._fp: io.BufferedReader | None = None
        self._response: Response | None = None
        self._method = ""


    def connect(self) -> None:
        sock = socket.create_connection((ascii_host(self.host), self.port), self.timeout)  # type: ignore[arg-type]
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=ascii_host(self._server_name))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._fp = sock.makefile("rb")

    def request(self, method: str, target: str, *, body: bytes | None, headers: dict[str, str]) -> None:
        if self._response is not None and not self._response.isclosed():
            raise ProtocolError("the last response on this connection was not read to its end")
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}", "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        if any("\r" in line or "\n" in line for line in lines):
            raise ValueError("a request line or header value holds CR or LF")
        head = "\r\n".join(lines)
        self._method = method
        self.sock.sendall(head.encode("iso-8859-1") + b"\r\n\r\n" + (body or b""))

    def getresponse(self) -> Response:
        """The response to the request just sent (its status and headers read)."""
        assert self._fp is not None
        self._response = Response(self._fp, self._method)
        return self._response

    def close(self) -> None:
        fp, sock, self._fp, self.sock, self._response = self._fp, self.sock, None, None, None
        if fp is not None:
            fp.close()
        if sock is not None:
            sock.close()
