"""Where the API server is and how to prove who we are: in-cluster or from a kubeconfig file.

In a pod (the DaemonSet) the kubelet mounts the service account at
``/var/run/secrets/kubernetes.io/serviceaccount`` (``token``, ``ca.crt``, ``namespace``) and sets
``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``.  Outside, ``--kubeconfig`` names a
kubeconfig file; its ``current-context`` picks the cluster and user.

Bound service-account tokens expire and the kubelet rewrites the token file (about hourly), so a
token that comes from a file is re-read whenever the file changes (one ``stat`` per request).

Supported user credentials: a bearer token (inline or ``tokenFile``), client certificates (files
or inline data), basic auth.  ``exec`` and ``auth-provider`` plugins run other programs and are
not supported: a clear error says so.
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qosmanager.api.decode import DecodeError, Limits, read_document_file

if TYPE_CHECKING:
    import ssl  # imported when a TLS context is built: standalone agents never load TLS (~4 MiB)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubeConfigError(ValueError):
    """The Kubernetes connection cannot be configured; the message says what to fix."""


@dataclass(eq=False)
class KubeConfig:
    server: str  # https://host:port[/prefix]
    ca_file: str | None = None
    ca_data: str | None = None  # PEM
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None  # PEM
    key_data: bytes | None = None  # PEM
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    namespace: str = "default"
    origin: str = ""  # "in-cluster" or the kubeconfig path, for messages
    _token_cache: tuple[tuple[int, int, int], str] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bearer_token(self, *, force: bool = False) -> str | None:
        """The token to send: inline, or the token file's content re-read when the file changed."""
        if self.token_file:
            try:
                st = os.stat(self.token_file)
                sig = (st.st_mtime_ns, st.st_size, st.st_ino)
                with self._lock:
                    cached = self._token_cache
                if cached is not None and cached[0] == sig and not force:
                    return cached[1]
                with open(self.token_file, encoding="utf-8") as f:
                    token = f.read().strip()
                with self._lock:
                    self._token_cache = (sig, token)
                return token
            except OSError:
                # a token file being rotated may be missing for an instant: keep the last one
                with self._lock:
                    cached = self._token_cache
                if cached is not None:
                    return cached[1]
                if self.token is None:
                    raise
        return self.token

    def authorization(self, *, force: bool = False) -> str | None:
        token = self.bearer_token(force=force)
        if token:
            return f"Bearer {token}"
        if self.username is not None:
            raw = f"{self.username}:{self.password or ''}".encode()
            return "Basic " + base64.b64encode(raw).decode()
        return None

    @property
    def is_https(self) -> bool:
        return self.server.lower().startswith("https://")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for this server (``None`` for plain HTTP)."""
        if not self.is_https:
            return None
        import ssl

        try:
            ctx = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        except (OSError, ssl.SSLError) as e:
            raise KubeConfigError(f"{self.origin}: cannot load the cluster CA: {e}") from None
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file or self.cert_data:
            self._load_client_cert(ctx)
        return ctx

    def _load_client_cert(self, ctx: ssl.SSLContext) -> None:
        import ssl

        if (self.cert_file or self.cert_data) and not (self.key_file or self.key_data):
            raise KubeConfigError(f"{self.origin}: a client certificate needs its key")
        try:
            if self.cert_file and self.key_file:
                ctx.load_cert_chain(self.cert_file, self.key_file)
                return
            # ssl loads certificates from files only: write the inline PEMs to a private temporary
            # directory for the call and remove them at once (tempfile imported here: with shutil,
            # bz2 and lzma it is a megabyte the in-cluster agent never needs)
            import tempfile

            with tempfile.TemporaryDirectory(prefix="qosmanager-kube-") as d:
                cert, key = self.cert_file, self.key_file
                if self.cert_data is not None:
                    cert = os.path.join(d, "client.crt")
                    _write_private(cert, self.cert_data)
                if self.key_data is not None:
                    key = os.path.join(d, "client.key")
                    _write_private(key, self.key_data)
                assert cert is not None and key is not None
                ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise KubeConfigError(f"{self.origin}: cannot load the client certificate: {e}") from None


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# ----------------------------------------------------------------------------------------------
# in-cluster
# ----------------------------------------------------------------------------------------------
def in_cluster_available(env: Mapping[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT")) and os.path.isfile(
        os.path.join(sa_dir, "token"))


def in_cluster_config(env: Mapping[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("not running in a cluster: KUBERNETES_SERVICE_HOST and "
                              "KUBERNETES_SERVICE_PORT are not set (use --kubeconfig)")
    token_file = os.path.join(sa_dir, "token")
    if not os.path.isfile(token_file):
        raise KubeConfigError(f"in-cluster: no service-account token at {token_file} (is "
                              "automountServiceAccountToken off?)")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    ca = os.path.join(sa_dir, "ca.crt")
    namespace = "default"
    try:
        with open(os.path.join(sa_dir, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip() or "default"
    except OSError:
        pass
    cfg = KubeConfig(server=f"https://{host}:{port}", ca_file=ca if os.path.isfile(ca) else None,
                     token_file=token_file, namespace=namespace, origin="in-cluster")
    cfg.bearer_token()  # fail now, clearly, if the token cannot be read
    return cfg


# ----------------------------------------------------------------------------------------------
# kubeconfig
# ----------------------------------------------------------------------------------------------
def _named(entries: Any, name: str, what: str, path: str) -> Mapping[str, Any]:
    if not isinstance(entries, list):
        raise KubeConfigError(f"{path}: '{what}s' must be a list")
    for e in entries:
        if isinstance(e, Mapping) and e.get("name") == name:
            body = e.get(what)
            if not isinstance(body, Mapping):
                raise KubeConfigError(f"{path}: {what} {name!r} has no '{what}' section")
            return body
    raise KubeConfigError(f"{path}: no {what} named {name!r}")


def _b64(value: Any, field_name: str, path: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=False)
    except (binascii.Error, ValueError) as e:
        raise KubeConfigError(f"{path}: {field_name} is not valid base64: {e}") from None


# a kubeconfig with inline certificates for many clusters is kilobytes; an alias bomb is refused
KUBECONFIG_LIMITS = Limits(max_bytes=16 * 1024 * 1024, max_depth=32, max_nodes=1_000_000)


def load_kubeconfig(path: str, context: str | None = None) -> KubeConfig:
    """The connection of ``context`` (default: the file's ``current-context``) in a kubeconfig file."""
    try:  # the decoder imports the YAML parser only for a YAML file: the in-cluster agent reads none
        doc = read_document_file(path, KUBECONFIG_LIMITS)
    except OSError as e:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {e.strerror}") from None
    except DecodeError as e:  # not YAML, not a mapping, or beyond the limits (the message names the file)
        raise KubeConfigError(f"bad kubeconfig: {e}") from None
    base = os.path.dirname(os.path.abspath(path))

    def rel(p: Any) -> str:
        p = os.path.expanduser(str(p))
        return p if os.path.isabs(p) else os.path.join(base, p)

    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise KubeConfigError(f"{path}: no current-context")
    ctx = _named(doc.get("contexts"), str(ctx_name), "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), "cluster", path)
    user_name = ctx.get("user")
    user: Mapping[str, Any] = _named(doc.get("users"), str(user_name), "user", path) if user_name else {}
    if "exec" in user:
        raise KubeConfigError(f"{path}: user {user_name!r} uses an exec credential plugin, which qosmanager "
                              "does not run; use a token, tokenFile or client certificate")
    if "auth-provider" in user:
        raise KubeConfigError(f"{path}: user {user_name!r} uses an auth-provider plugin, which qosmanager "
                              "does not support; use a token, tokenFile or client certificate")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"{path}: cluster {ctx.get('cluster')!r}: server must be an http(s) URL, got "
                              f"{server!r}")
    cfg = KubeConfig(server=server.rstrip("/"), origin=path,
                     namespace=str(ctx.get("namespace") or "default"),
                     insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
                     tls_server_name=cluster.get("tls-server-name") or None)
    if cluster.get("certificate-authority-data"):
        cfg.ca_data = _b64(cluster["certificate-authority-data"], "certificate-authority-data", path).decode()
    elif cluster.get("certificate-authority"):
        cfg.ca_file = rel(cluster["certificate-authority"])
    if user.get("client-certificate-data"):
        cfg.cert_data = _b64(user["client-certificate-data"], "client-certificate-data", path)
    elif user.get("client-certificate"):
        cfg.cert_file = rel(user["client-certificate"])
    if user.get("client-key-data"):
        cfg.key_data = _b64(user["client-key-data"], "client-key-data", path)
    elif user.get("client-key"):
        cfg.key_file = rel(user["client-key"])
    if user.get("token"):
        cfg.token = str(user["token"])
    if user.get("tokenFile"):
        cfg.token_file = rel(user["tokenFile"])
        try:
            cfg.bearer_token()
        except OSError as e:
            raise KubeConfigError(f"{path}: cannot read tokenFile {cfg.token_file}: {e.strerror}") from None
    if user.get("username") is not None:
        cfg.username, cfg.password = str(user["username"]), str(user.get("password") or "")
    return cfg


def load_config(kubeconfig: str | None = None, *, env: Mapping[str, str] | None = None,
                sa_dir: str = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    """``--kubeconfig`` when given, else the in-cluster service account."""
    if kubeconfig:
        return load_kubeconfig(kubeconfig)
    return in_cluster_config(env, sa_dir)
