"""Where the API server is and how to authenticate to it: a kubeconfig file, or the in-cluster
service account.

Why our own loader, not kubernetes-asyncio's: importing its loader imports its whole generated
client (~860 API and model modules), 63 MB of an idle operator's 112 MB of RSS
(docs/benchmarks.md, "Memory"), of which the operator used nothing but the loader and one
request method. What client-go users rely on is read here: the server and its CA (file or
data, or insecure-skip-tls-verify), tls-server-name, proxy-url, client certificates (file or
data), bearer tokens (token, tokenFile: re-read every minute, like a projected service-account
token), basic auth, and exec credential plugins (client.authentication.k8s.io, token cached
until its expirationTimestamp), and impersonation (`as`, `as-uid`, `as-groups`,
`as-user-extra`: the Impersonate-* headers, as client-go's impersonating round tripper sends
them). The legacy `auth-provider` plugins (gcp, azure, oidc), removed from kubectl in
Kubernetes 1.26 in favour of exec plugins, are refused with `KubeconfigError`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import ssl
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from trainjobs.errors import SpecInvalid
from trainjobs.yamlio import read_one

__all__ = ["Credentials", "KubeconfigError", "current_context", "in_cluster", "load"]

_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: Seconds a token read from a file is used before the file is read again (client-go: 1 min).
TOKEN_FILE_TTL = 60.0

#: An exec plugin's token is asked for again this long before it expires.
EXEC_EARLY = 10.0


class KubeconfigError(Exception):
    """No usable kubeconfig or in-cluster configuration (missing, malformed, unsupported)."""


@dataclass
class _Exec:
    """A client.authentication.k8s.io exec plugin: runs `command` for a credential."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    cwd: str | None
    token: str | None = None
    cert: bytes | None = None
    key: bytes | None = None
    expires: float | None = None

    async def fetch(self) -> None:
        info = {"apiVersion": self.api_version, "kind": "ExecCredential",
                "spec": {"interactive": False}}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command, *self.args, cwd=self.cwd, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)})
        except OSError as exc:
            raise KubeconfigError(f"exec plugin {self.command!r}: {exc}") from None
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise KubeconfigError(f"exec plugin {self.command!r} exited {proc.returncode}: "
                                  f"{err.decode(errors='replace').strip()}")
        try:
            status = json.loads(out).get("status") or {}
        except (ValueError, AttributeError):
            raise KubeconfigError(f"exec plugin {self.command!r}: not an ExecCredential"
                                  ) from None
        self.token = status.get("token")
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            self.cert = str(status["clientCertificateData"]).encode()
            self.key = str(status["clientKeyData"]).encode()
        if not self.token and self.cert is None:
            raise KubeconfigError(f"exec plugin {self.command!r} gave neither a token nor a "
                                  "client certificate")
        expiry = status.get("expirationTimestamp")
        self.expires = _rfc3339(str(expiry)) if expiry else None


@dataclass
class Credentials:
    """One cluster and one user: the server, how to trust it, and how to authenticate."""

    server: str
    ca_data: bytes | None = None
    ca_file: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    basic: tuple[str, str] | None = None
    exec: _Exec | None = None
    namespace: str | None = None
    #: Impersonate-* header pairs sent with every request (a header may repeat).
    impersonate: tuple[tuple[str, str], ...] = ()
    _token_read: float = field(default=0.0, repr=False)

    async def prepare(self) -> None:
        """Run an exec plugin once before the TLS context is built (it may give a client
        certificate)."""
        if self.exec is not None:
            await self.exec.fetch()
            if self.exec.cert is not None:
                self.cert_data, self.key_data = self.exec.cert, self.exec.key

    def ssl_context(self) -> ssl.SSLContext:
        if self.insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(
                cafile=self.ca_file,
                cadata=self.ca_data.decode() if self.ca_data is not None else None)
        if self.cert_data is not None and self.key_data is not None:
            with _files(self.cert_data, self.key_data) as (cert, key):
                ctx.load_cert_chain(cert, key)  # read now: the files go at once
        elif self.cert_file and self.key_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    async def authorization(self) -> str | None:
        """The Authorization header of the next request, fresh (a token file re-read, an
        expiring exec credential renewed)."""
        if self.exec is not None and self.exec.token is not None:
            if self.exec.expires is not None and time.time() > self.exec.expires - EXEC_EARLY:
                await self.exec.fetch()
            return f"Bearer {self.exec.token}"
        if self.token_file and time.monotonic() - self._token_read > TOKEN_FILE_TTL:
            try:
                self.token = Path(self.token_file).read_text().strip()
            except OSError as exc:
                if self.token is None:
                    raise KubeconfigError(f"token file {self.token_file}: {exc}") from None
            self._token_read = time.monotonic()
        if self.token:
            return f"Bearer {self.token}"
        if self.basic is not None:
            raw = f"{self.basic[0]}:{self.basic[1]}".encode()
            return f"Basic {base64.b64encode(raw).decode()}"
        return None


def in_cluster() -> Credentials | None:
    """The pod's service account, or None outside a pod."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
        "KUBERNETES_SERVICE_PORT")
    token = _SA_DIR / "token"
    if not host or not port or not token.exists():
        return None
    if ":" in host:
        host = f"[{host}]"
    ns = _SA_DIR / "namespace"
    return Credentials(server=f"https://{host}:{port}", ca_file=str(_SA_DIR / "ca.crt"),
                       token_file=str(token),
                       namespace=ns.read_text().strip() if ns.exists() else None)


def _paths(path: str | None) -> list[str]:
    if path:
        return [os.path.expanduser(path)]
    env = os.environ.get("KUBECONFIG", "")
    found = [os.path.expanduser(p) for p in env.split(os.pathsep) if p]
    return found or [os.path.expanduser("~/.kube/config")]


def _merged(path: str | None) -> tuple[dict[str, Any], str]:
    """The kubeconfig (several files of $KUBECONFIG merged, the first naming an entry wins,
    as kubectl does) and the directory relative file paths are read from."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    names: dict[str, set[str]] = {k: set() for k in merged}
    base = ""
    paths = [p for p in _paths(path) if path or os.path.exists(p)]
    if not paths:
        raise KubeconfigError(f"no kubeconfig: {', '.join(_paths(path))} not found")
    for p in paths:
        try:
            doc = read_one(Path(p)) or {}
        except SpecInvalid as exc:
            raise KubeconfigError(f"kubeconfig {p}: {'; '.join(map(str, exc.errors))}") from None
        if not isinstance(doc, dict):
            raise KubeconfigError(f"kubeconfig {p}: not a mapping")
        base = base or os.path.dirname(os.path.abspath(p))
        for section in merged:
            for item in doc.get(section) or []:
                if isinstance(item, dict) and str(item.get("name")) not in names[section]:
                    names[section].add(str(item.get("name")))
                    merged[section].append(item)
        if not merged.get("current-context"):
            merged["current-context"] = doc.get("current-context")
    return merged, base


def _named(doc: dict[str, Any], section: str, name: str, key: str) -> dict[str, Any]:
    for item in doc.get(section) or []:
        if item.get("name") == name:
            value = item.get(key) or {}
            if isinstance(value, dict):
                return value
    raise KubeconfigError(f"kubeconfig: no {section[:-1]} named {name!r}")


def current_context(path: str | None = None) -> dict[str, Any]:
    """The current context's fields (cluster, user, namespace) of the kubeconfig."""
    doc, _ = _merged(path)
    name = doc.get("current-context")
    if not name:
        raise KubeconfigError("kubeconfig: no current-context")
    return _named(doc, "contexts", str(name), "context")


def load(path: str | None = None, context: str | None = None) -> Credentials:
    """The credentials of `context` (default: the current one) of the kubeconfig at `path`
    (default: $KUBECONFIG, else ~/.kube/config)."""
    doc, base = _merged(path)
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError("kubeconfig: no current-context")
    ctx = _named(doc, "contexts", str(name), "context")
    cluster = _named(doc, "clusters", str(ctx.get("cluster")), "cluster")
    user = _named(doc, "users", str(ctx.get("user")), "user") if ctx.get("user") else {}
    if not cluster.get("server"):
        raise KubeconfigError(f"kubeconfig: cluster {ctx.get('cluster')!r} has no server")
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "?")
        raise KubeconfigError(
            f"kubeconfig: user {ctx.get('user')!r} uses the auth-provider {provider!r}, which "
            "trainjobs does not support (kubectl dropped it in 1.26): use its exec plugin")

    def path_of(value: Any) -> str | None:
        return os.path.join(base, os.path.expanduser(str(value))) if value else None

    creds = Credentials(
        server=str(cluster["server"]).rstrip("/"),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        ca_file=path_of(cluster.get("certificate-authority")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
        cert_data=_b64(user.get("client-certificate-data")),
        key_data=_b64(user.get("client-key-data")),
        cert_file=path_of(user.get("client-certificate")),
        key_file=path_of(user.get("client-key")),
        token=user.get("token") or None,
        token_file=path_of(user.get("tokenFile")),
        basic=(str(user["username"]), str(user.get("password") or ""))
        if user.get("username") else None,
        namespace=ctx.get("namespace") or None,
        impersonate=impersonation_headers(user))
    ex = user.get("exec")
    if isinstance(ex, dict):
        if not ex.get("command"):
            raise KubeconfigError(f"kubeconfig: user {ctx.get('user')!r}: exec has no command")
        command = str(ex["command"])
        if os.sep in command and not os.path.isabs(command):
            command = os.path.join(base, command)
        creds.exec = _Exec(command, [str(a) for a in ex.get("args") or []],
                           {str(e["name"]): str(e["value"]) for e in ex.get("env") or []},
                           str(ex.get("apiVersion") or "client.authentication.k8s.io/v1"),
                           base)
    return creds


def impersonation_headers(user: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The Impersonate-* headers of a kubeconfig user's `as` fields, as client-go's
    `impersonatingRoundTripper` sets them: once any is given, Impersonate-User (its value,
    possibly empty: the API server then refuses groups without a user, as it does kubectl's),
    Impersonate-Uid, one Impersonate-Group per group, one Impersonate-Extra-<key> per value
    (the key %-encoded where it is not an HTTP token character, or is '%')."""
    groups = user.get("as-groups") or []
    extra = user.get("as-user-extra") or {}
    if not (user.get("as") or user.get("as-uid") or groups or extra):
        return ()
    headers = [("Impersonate-User", str(user.get("as") or ""))]
    if user.get("as-uid"):
        headers.append(("Impersonate-Uid", str(user["as-uid"])))
    headers += [("Impersonate-Group", str(g)) for g in groups]
    for key, values in (extra.items() if isinstance(extra, dict) else ()):
        for value in values if isinstance(values, list) else [values]:
            headers.append((f"Impersonate-Extra-{_header_key_escape(str(key))}", str(value)))
    return tuple(headers)


#: RFC 7230's token characters less '%' (client-go's legalHeaderKeyBytes and shouldEscape).
_TOKEN = frozenset(b"!#$&'*+-.^_`|~0123456789"
                   b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _header_key_escape(key: str) -> str:
    return "".join(chr(b) if b in _TOKEN else f"%{b:02X}" for b in key.encode())


def _b64(value: Any) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value))
    except ValueError:
        raise KubeconfigError("kubeconfig: a *-data field is not base64") from None


def _rfc3339(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise KubeconfigError(f"exec plugin: bad expirationTimestamp {value!r}") from None


@contextlib.contextmanager
def _files(*blobs: bytes) -> Iterator[list[str]]:
    """Private temporary files holding `blobs` (ssl reads certificates from files only),
    removed on exit."""
    with tempfile.TemporaryDirectory(prefix="trainjobs-tls-") as tmp:
        paths = []
        for i, blob in enumerate(blobs):
            p = os.path.join(tmp, str(i))
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            paths.append(p)
        yield paths
