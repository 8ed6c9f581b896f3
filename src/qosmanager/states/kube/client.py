"""A small Kubernetes API client on the standard library (``socket``, ``ssl``, ``json``).

The agent needs five verbs on three resources: list, watch, get, POST (evictions, events) and
PATCH (events).  A general client library costs more memory than the whole budget of the
Kubernetes layer (importing lightkube and httpx adds about 16 MiB to the process; the standard
library's HTTP, TLS and JSON about 6 MiB, its ``http.client`` with ``email`` 1 MiB of that), so this
module speaks the protocol directly, HTTP/1.1 through :mod:`qosmanager.states.kube.http1`:

* keep-alive connections in named *channels*: each watch has its own (a watch occupies its
  connection for minutes), other requests share one unless they name their own (evictions, which
  the agent's loop waits for, never queue behind the event recorder's posts); a channel serves
  one request at a time;
* a request on a reused connection that the server had closed meanwhile is retried once on a new
  connection (the keep-alive race every HTTP client handles);
* ``list`` follows ``limit``/``continue`` pages; ``watch`` reads the chunked stream line by line
  and yields ``(type, object)``; an ``ERROR`` event raises :class:`KubeError` with its code;
* a 401 re-reads a rotated token file and retries once;
* :meth:`KubeClient.interrupt` wakes a request blocked on another thread; a channel given a
  ``cancelled`` predicate (:meth:`KubeClient.cancel_when`) also refuses a request that had not yet
  connected when the interruption came, so an interruption is never lost in between;
* every error is a :class:`KubeError` with the HTTP status (0 when there was no answer), the
  API's Status reason and message, and ``Retry-After`` when the server sent one;
* answers are bounded: a body is read up to 128 MiB and a watch event up to 64 MiB, and both are
  decoded within :data:`~qosmanager.api.decode.RESPONSE_LIMITS` (100 levels of nesting), so a
  broken server or proxy gets a clear :class:`KubeError`, never an unbounded allocation or a
  ``RecursionError``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from qosmanager import __version__
from qosmanager.api.decode import RESPONSE_LIMITS, decode_json
from qosmanager.states.kube import http1
from qosmanager.states.kube.config import KubeConfig

log = logging.getLogger(__name__)

USER_AGENT = f"qosmanager/{__version__}"
MAX_EVENT_LINE = 64 << 20  # one watch event (one object) per line
MAX_RESPONSE = RESPONSE_LIMITS.max_bytes  # one answer (a list page)
WATCH_READ_MARGIN = 30.0  # seconds of silence beyond timeoutSeconds before a watch counts as dead
SHARED = "shared"

PATCH_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}
def _never() -> bool:
    return False


_STALE = (http1.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError,
          ssl.SSLEOFError, ssl.SSLZeroReturnError)


class KubeError(Exception):
    """An API call failed: ``status`` is the HTTP code, or 0 when the server could not be reached."""

    def __init__(self, status: int, message: str, *, reason: str = "", retry_after: float = 0.0,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.message = message
        self.reason = reason
        self.retry_after = retry_after
        self.details = dict(details or {})

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @classmethod
    def from_response(cls, status: int, headers: Mapping[str, str], body: bytes, reason_phrase: str = ""
                      ) -> KubeError:
        message, reason = body.decode("utf-8", "replace").strip()[:500], ""
        details: dict[str, Any] = {}
        try:
            obj = decode_json(body, RESPONSE_LIMITS)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and obj.get("kind") == "Status":
            message = str(obj.get("message") or message)
            reason = str(obj.get("reason") or "")
            raw = obj.get("details")
            details = raw if isinstance(raw, dict) else {}
        retry_after = _retry_after(headers.get("Retry-After"), details)
        return cls(status, message or reason_phrase, reason=reason,
                   retry_after=retry_after, details=details)

    @classmethod
    def from_status(cls, obj: Any) -> KubeError:
        """An ``ERROR`` watch event's Status object."""
        if not isinstance(obj, dict):
            return cls(500, f"watch error: {obj!r}", reason="InternalError")
        raw = obj.get("details")
        details: dict[str, Any] = raw if isinstance(raw, dict) else {}
        code = obj.get("code")
        return cls(int(code) if isinstance(code, int) else 500, str(obj.get("message") or ""),
                   reason=str(obj.get("reason") or ""), retry_after=_retry_after(None, details),
                   details=details)


def _retry_after(header: str | None, details: Mapping[str, Any]) -> float:
    for value in (header, details.get("retryAfterSeconds")):
        try:
            if value is not None and float(value) > 0:
                return float(value)
        except (TypeError, ValueError):
            continue
    return 0.0


class _Channel:
    """One keep-alive connection; one request (or watch stream) at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.conn: http1.Connection | None = None
        self.used = False  # the connection has served a request: the server may have closed it since
        # Whether a request on this channel is no longer wanted (the owner's stop or relist).  The owner
        # sets what it reads *before* calling interrupt(): a request checks it after its socket exists,
        # so either the check sees it or interrupt() finds the socket to shut down -- never neither.
        self.cancelled: Callable[[], bool] = _never

    def drop(self) -> None:
        conn, self.conn = self.conn, None
        self.used = False
        if conn is not None:
            conn.close()

    def interrupt(self) -> None:
        """Unblock a reader on another thread (closing alone does not wake a blocked recv)."""
        conn = self.conn
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class KubeClient:
    """The verbs the agent needs (see the module docstring).  Thread-safe."""

    def __init__(self, config: KubeConfig, *, timeout: float = 10.0, user_agent: str = USER_AGENT,
                 page_size: int = 500) -> None:
        self.config = config
        self.timeout = timeout
        self.user_agent = user_agent
        self.page_size = page_size
        url = urlsplit(config.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{config.origin}: bad API server URL {config.server!r}")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._ssl = config.ssl_context()
        self._channels: dict[str, _Channel] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.requests = 0  # answered requests, for tests and metrics

    # ------------------------------------------------------------------ plumbing
    def _channel(self, name: str) -> _Channel:
        with self._lock:
            ch = self._channels.get(name)
            if ch is None:
                ch = self._channels[name] = _Channel(name)
            return ch

    def _connect(self, timeout: float) -> http1.Connection:
        return http1.Connection(self._host, self._port, timeout=timeout, context=self._ssl,
                                server_name=self.config.tls_server_name)

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        if not path.startswith("/"):
            raise ValueError(f"API path must start with '/': {path!r}")
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None and v != ""})
        return self._prefix + quote(path, safe="/:@") + (f"?{query}" if query else "")

    def _headers(self, content_type: str | None, *, force_token: bool = False) -> dict[str, str]:
        h = {"User-Agent": self.user_agent, "Accept": "application/json"}
        try:
            auth = self.config.authorization(force=force_token)
        except OSError as e:
            raise KubeError(0, f"cannot read the service-account token: {e}") from None
        if auth:
            h["Authorization"] = auth
        if content_type:
            h["Content-Type"] = content_type
        return h

    def _send(self, ch: _Channel, method: str, target: str, body: bytes | None, content_type: str | None,
              timeout: float) -> http1.Response:
        """Send one request on the channel's connection and return the response (status read)."""
        if self._closed:
            raise KubeError(0, "the Kubernetes client is closed")
        force_token = False
        for attempt in range(3):
            reused = ch.used and ch.conn is not None
            if ch.conn is None:
                ch.conn = self._connect(timeout)
            conn = ch.conn
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                if conn.sock is None:
                    conn.connect()  # before the check below: from here on an interrupt() finds the socket
                if self._closed or ch.cancelled():
                    ch.drop()
                    raise KubeError(0, f"{method} {target}: interrupted")
                headers = self._headers(content_type, force_token=force_token)
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
            except _STALE as e:
                ch.drop()
                if reused and attempt == 0:
                    log.debug("kube %s: keep-alive connection was closed by the server; retrying", ch.name)
                    continue
                raise KubeError(0, f"{method} {target}: connection lost: {e}") from None
            except (OSError, http1.ProtocolError) as e:
                ch.drop()
                raise KubeError(0, f"{method} {target}: cannot reach {self.config.server}: {e}") from None
            ch.used = True
            if resp.status == 401 and self.config.token_file and not force_token:
                self._finish(ch, resp)  # read to its end (the connection is kept) or dropped
                force_token = True  # the token may have been rotated: read it again and retry once
                continue
            return resp
        raise KubeError(0, f"{method} {target}: no answer after retries")

    def _finish(self, ch: _Channel, resp: http1.Response) -> bytes:
        """The body, at most :data:`MAX_RESPONSE` bytes (a longer one is refused before it is read)."""
        length = resp.getheader("Content-Length") or ""
        if length.isdigit() and int(length) > MAX_RESPONSE:
            ch.drop()
            raise KubeError(resp.status, f"the answer is {length} bytes, more than the limit of "
                                         f"{MAX_RESPONSE}")
        try:
            data = resp.read(MAX_RESPONSE + 1)
        except (OSError, http1.ProtocolError) as e:
            ch.drop()
            raise KubeError(0, f"reading the answer failed: {e}") from None
        if len(data) > MAX_RESPONSE:
            ch.drop()  # the rest is unread: the connection cannot carry another request
            raise KubeError(resp.status, f"the answer is longer than the limit of {MAX_RESPONSE} bytes")
        if resp.will_close or not resp.isclosed():
            ch.drop()
        return data

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", channel: str = SHARED,
                timeout: float | None = None, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        """One call; the decoded JSON answer (each object through ``object_hook`` when given), or
        :class:`KubeError`."""
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        ch = self._channel(channel)
        target = self._target(path, params)
        with ch.lock:
            resp = self._send(ch, method, target, payload, content_type if payload is not None else None,
                              self.timeout if timeout is None else timeout)
            data = self._finish(ch, resp)
        self.requests += 1
        if resp.status >= 400:
            raise KubeError.from_response(resp.status, resp.headers, data, resp.reason)
        try:
            return decode_json(data, RESPONSE_LIMITS, object_hook=object_hook) if data else {}
        except ValueError as e:
            raise KubeError(resp.status, f"{method} {path}: the answer cannot be decoded: {e}") from None

    # ------------------------------------------------------------------ verbs
    def get(self, path: str, params: Mapping[str, Any] | None = None, *, channel: str = SHARED,
            timeout: float | None = None, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        return self.request("GET", path, params=params, channel=channel, timeout=timeout, object_hook=object_hook)

    def post(self, path: str, body: Any, *, channel: str = SHARED, timeout: float | None = None) -> Any:
        return self.request("POST", path, body=body, channel=channel, timeout=timeout)

    def patch(self, path: str, body: Any, patch_type: str = "strategic", *, channel: str = SHARED,
              timeout: float | None = None) -> Any:
        try:
            ct = PATCH_TYPES[patch_type]
        except KeyError:
            raise ValueError(f"unknown patch type {patch_type!r}; one of {', '.join(PATCH_TYPES)}") from None
        return self.request("PATCH", path, body=body, content_type=ct, channel=channel, timeout=timeout)

    def delete(self, path: str, body: Any = None, *, channel: str = SHARED,
               timeout: float | None = None) -> Any:
        return self.request("DELETE", path, body=body, channel=channel, timeout=timeout)

    def list(self, path: str, params: Mapping[str, Any] | None = None, *, channel: str = SHARED,
             resource_version: str | None = None,
             object_hook: Callable[[dict[str, Any]], Any] | None = None) -> tuple[list[Any], str]:
        """Every item of a collection, page by page; returns ``(items, resourceVersion)``.

        ``resource_version="0"`` lets the server answer from its watch cache (cheap for the API
        server, possibly slightly old: right for a first list); ``None`` asks for a consistent read.
        ``limit`` is asked for either way, as client-go's pager does: an API server that pages its watch
        cache answers in pages (a 10,000-pod list is then not one 50 MB answer), one that does not
        ignores it.
        ``object_hook`` shrinks each object as it is decoded (the pods' :func:`prune_pod_hook`).
        """
        items: list[Any] = []
        base = dict(params or {})
        if resource_version is not None:
            base["resourceVersion"] = resource_version
        if self.page_size > 0:
            base["limit"] = self.page_size
        cont = ""
        rv = ""
        while True:
            # a continued page names no resourceVersion (the token holds it; the API server refuses both)
            query = {**{k: v for k, v in base.items() if k != "resourceVersion"}, "continue": cont} if cont else base
            page = self.get(path, query, channel=channel, object_hook=object_hook)
            if not isinstance(page, dict) or not isinstance(page.get("items", []), list):
                raise KubeError(500, f"GET {path}: the answer is not a list")
            # objects only (a hook may have made them something else than a dict: not a scalar or a list)
            items.extend(i for i in (page.get("items") or []) if i is not None
                         and not isinstance(i, (list, str, int, float)))
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            cont = str(meta.get("continue") or "")
            if not cont:
                return items, rv

    def watch(self, path: str, params: Mapping[str, Any] | None = None, *, resource_version: str,
              timeout: float = 300.0, channel: str = SHARED,
              on_open: Callable[[], None] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Watch a collection from ``resource_version`` for at most ``timeout`` seconds.

        Yields ``(type, object)`` for ADDED, MODIFIED, DELETED and BOOKMARK events; ends when the
        server ends the stream; raises :class:`KubeError` on an ``ERROR`` event (410 when the
        resourceVersion is too old) or a broken stream (status 0).  ``on_open`` is called once
        the server has accepted the watch (before any event: an idle watch is a live one).
        """
        q = dict(params or {})
        q.update(watch="true", resourceVersion=resource_version, allowWatchBookmarks="true",
                 timeoutSeconds=str(max(1, int(timeout))))
        ch = self._channel(channel)
        target = self._target(path, q)
        with ch.lock:
            resp = self._send(ch, "GET", target, None, None, timeout + WATCH_READ_MARGIN)
            self.requests += 1
            if resp.status != 200:
                raise KubeError.from_response(resp.status, resp.headers, self._finish(ch, resp), resp.reason)
            if on_open is not None:
                on_open()
            finished = False
            try:
                for line in self._lines(resp, path):
                    if line is None:
                        finished = True
                        return
                    try:
                        ev = decode_json(line, RESPONSE_LIMITS)
                        type_, obj = ev["type"], ev["object"]
                    except ValueError as e:
                        raise KubeError(0, f"watch {path}: an event that cannot be decoded: {e}") from None
                    except (KeyError, TypeError):
                        raise KubeError(0, f"watch {path}: not a watch event: {line[:200]!r}") from None
                    if type_ == "ERROR":
                        raise KubeError.from_status(obj)
                    if isinstance(obj, dict):
                        yield str(type_), obj
            finally:
                if not finished or resp.will_close:
                    ch.drop()  # a stream left half-read cannot carry the next request

    @staticmethod
    def _lines(resp: http1.Response, path: str) -> Iterator[bytes | None]:
        """The non-empty lines of a streamed body, then ``None`` when the server ended it properly.

        ``read1`` gives what each receive brought and raises ``IncompleteRead`` when the connection
        is cut inside the body (between two chunks too): a cut stream never passes for its end.
        """
        buf = b""
        while True:
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                line = buf[start:nl].strip()
                start = nl + 1
                if line:
                    yield line
            buf = buf[start:]
            if len(buf) > MAX_EVENT_LINE:
                raise KubeError(0, f"watch {path}: an event longer than {MAX_EVENT_LINE} bytes")
            try:
                data = resp.read1(1 << 16)
            except (OSError, http1.ProtocolError, ValueError) as e:
                raise KubeError(0, f"watch {path}: stream broken: {e!r}") from None
            if not data:
                if not resp.isclosed():
                    raise KubeError(0, f"watch {path}: stream ended early")
                if buf.strip():
                    yield buf.strip()
                yield None
                return
            buf += data

    def cancel_when(self, channel: str, cancelled: Callable[[], bool]) -> None:
        """Refuse requests on ``channel`` while ``cancelled()`` is true (checked once connected, before
        sending): set what it reads, then call :meth:`interrupt`, and a request about to start on another
        thread fails with status 0 rather than missing the interruption and blocking."""
        self._channel(channel).cancelled = cancelled

    def interrupt(self, channel: str) -> None:
        """Wake a request or watch blocked on ``channel`` (from another thread); it fails with status 0.
        Only a request already connected is woken; see :meth:`cancel_when` for one about to start."""
        with self._lock:
            ch = self._channels.get(channel)
        if ch is not None:
            ch.interrupt()

    def close(self) -> None:
        """Close every connection; a watch blocked on another thread wakes up with an error."""
        self._closed = True
        with self._lock:
            channels = list(self._channels.values())
        for ch in channels:
            ch.interrupt()
        for ch in channels:
            if ch.lock.acquire(timeout=1.0):
                try:
                    ch.drop()
                finally:
                    ch.lock.release()
