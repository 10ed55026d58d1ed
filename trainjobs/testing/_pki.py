"""The certificates and keys of a throwaway control plane, made with ``openssl``.

One CA signs the kube-apiserver serving certificate (127.0.0.1, localhost and the in-cluster
names) and an admin client certificate in the ``system:masters`` group; a separate key pair
signs and verifies service-account tokens. P-256 keys: each ``openssl`` call takes ~15 ms,
where RSA-2048 generation costs ten times that. ``openssl`` 3.0 or newer is required
(``req -x509 -CA`` signs in one call).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from trainjobs.testing._errors import ControlPlaneError

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
authorityKeyIdentifier = keyid
subjectAltName = {sans}
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""

SERVER_SANS = (
    "IP:127.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)
_KEY_ARGS = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class Pki:
    """Paths of every file :func:`make_pki` writes."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def make_pki(directory: Path, *, extra_sans: tuple[str, ...] = ()) -> Pki:
    """Write a fresh CA, serving cert, admin client cert and SA key pair into ``directory``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ControlPlaneError("'openssl' is required to make the control plane's certificates")
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG.format(sans=",".join(SERVER_SANS + extra_sans)))
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )

    def req(key: Path, cert: Path, subject: str, extensions: str, *signing: str) -> list[str]:
        return [
            openssl, "req", "-x509", *_KEY_ARGS, "-keyout", str(key), "-out", str(cert),
            "-subj", subject, "-extensions", extensions, "-days", "3650", "-config", str(config),
            *signing,
        ]  # fmt: skip

    _run([req(pki.ca_key, pki.ca_cert, "/CN=trainjobs-test-ca", "ca")])
    by_ca = ("-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key))
    # The three remaining files are independent: make them concurrently.
    _run([
        req(pki.serving_key, pki.serving_cert, "/CN=kube-apiserver", "server", *by_ca),
        req(pki.admin_key, pki.admin_cert, "/O=system:masters/CN=trainjobs-admin", "client",
            *by_ca),
        [openssl, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", str(pki.sa_key)],
    ])  # fmt: skip
    _run([[openssl, "pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub)]])
    return pki


def _run(commands: list[list[str]]) -> None:
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd in commands
    ]
    failures = []
    for cmd, proc in zip(commands, procs, strict=True):
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{' '.join(cmd[:3])}... exited {proc.returncode}: {output.strip()}")
    if failures:
        raise ControlPlaneError("making certificates failed:\n" + "\n".join(failures))


@dataclass(frozen=True)
class ServingCert:
    """A serving certificate and key (named ``tls.crt``/``tls.key``, as controller-runtime's
    webhook server reads them from its cert dir) and the CA bundle that verifies it."""

    directory: Path
    cert: Path
    key: Path
    ca_cert: Path


def make_serving_cert(
    directory: Path,
    *,
    subject: str,
    ca_cert: Path | None = None,
    ca_key: Path | None = None,
    sans: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost"),
) -> ServingCert:
    """Write ``tls.crt``/``tls.key`` for ``sans`` into ``directory``: signed by the given CA
    (a webhook the API server calls, verified with that CA as its caBundle), or self-signed
    when none is given (a certificate nobody verifies, but one that must parse)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ControlPlaneError("'openssl' is required to make certificates")
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG.format(sans=",".join(sans)))
    cert, key = directory / "tls.crt", directory / "tls.key"
    signing: tuple[str, ...] = ()
    extensions = "ca"
    if ca_cert is not None and ca_key is not None:
        signing = ("-CA", str(ca_cert), "-CAkey", str(ca_key))
        extensions = "server"
    _run([[openssl, "req", "-x509", *_KEY_ARGS, "-keyout", str(key), "-out", str(cert),
           "-subj", subject, "-extensions", extensions, "-days", "3650", "-config", str(config),
           *signing]])  # fmt: skip
    return ServingCert(directory, cert, key, ca_cert if ca_cert is not None else cert)
