"""Kubeflow's training-operator (v1.9.4, ``./cmd/training-operator.v1``) run out of cluster
beside a benchmark's control plane, as the baseline ``bench.fanout --training-operator``
compares the operator with.

Why a harness: in a cluster it runs as a Deployment whose Secret volume holds its webhook
certificate. Out of cluster it needs what its ``cmd/`` code and cert rotator
(open-policy-agent/cert-controller v0.16.0) expect, read from their source:

* the Secret ``kubeflow/training-operator-webhook-cert`` (``--webhook-secret-name``, in
  ``$MY_POD_NAMESPACE``, default ``kubeflow``): the rotator GETs it at start and exits when it
  is missing. The harness fills it with its own CA and serving certificate, so the rotator
  finds them valid and writes nothing: ``ca.crt`` (``DNS:training-operator-ca``, the
  rotator's CA name) and ``ca.key`` as an RSA PKCS#1 key (the rotator parses it with
  ``x509.ParsePKCS1PrivateKey`` before it marks the CA injected, and without that the
  operator never becomes ready), ``tls.crt``/``tls.key`` for
  ``training-operator.kubeflow.svc`` and 127.0.0.1;
* its webhook server's cert dir: controller-runtime reads ``$TMPDIR/k8s-webhook-server/
  serving-certs``, so the process gets a ``TMPDIR`` of its own holding the serving pair. The
  rotator also waits for ``tls.crt`` at the fixed path ``/tmp/k8s-webhook-server/
  serving-certs`` (``pkg/cert/cert.go``; there, in a cluster, the Secret is mounted) but only
  checks that it exists: the harness writes the same pair there once when it is absent;
* its ``kubeflow.org/v1`` CRDs and ``validator.training-operator.kubeflow.org`` from the
  module's ``manifests/base`` (copied beside the binary by ``scripts/build-training-operator.sh``),
  the webhooks pointed at ``https://127.0.0.1:PORT`` with the harness CA: the API server calls
  them on every create, as in a real install. The rotator then writes the same CA into them.

Its webhook server listens on every interface (``cmd/training-operator.v1/main.go`` sets a port
only, ``--webhook-server-port``, on a free port here); health probes on 127.0.0.1, metrics off.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.report import log
from trainjobs.testing import ControlPlane, apply_crds
from trainjobs.testing._binaries import cache_root, ensure_built
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._pki import make_serving_cert
from trainjobs.testing._process import free_ports

__all__ = ["DEFAULT_FLAGS", "TRAINING_OPERATOR_VERSION", "TUNED_FLAGS", "TrainingOperator",
           "find_training_operator"]

TRAINING_OPERATOR_VERSION = "v1.9.4"
SCRIPT_NAME = "build-training-operator.sh"
NAMESPACE = "kubeflow"  # its default $MY_POD_NAMESPACE
SECRET = "training-operator-webhook-cert"  # its --webhook-secret-name default
SERVICE_DNS = "training-operator.kubeflow.svc"  # --webhook-service-name . namespace .svc
CA_NAME = "training-operator-ca"  # pkg/cert/cert.go caName
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
#: pkg/cert/cert.go certDir: the rotator waits for tls.crt there.
FIXED_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
#: Its flags' defaults (1 controller thread, 20 requests/s, burst 30), spelt out.
DEFAULT_FLAGS = "--controller-threads 1 --kube-api-qps 20 --kube-api-burst 30"
#: "Tuned" as issue 28 has it: 16 controller threads, 500 requests/s, burst 1000.
TUNED_FLAGS = "--controller-threads 16 --kube-api-qps 500 --kube-api-burst 1000"


def find_training_operator(*, build: bool = True) -> Path:
    """The directory (``bin/training-operator``, ``crds/``, ``webhook/manifests.yaml``) of the
    pinned training-operator, built when missing and allowed (minutes on a warm Go cache)."""
    home = cache_root() / "training-operator" / f"training-operator-{TRAINING_OPERATOR_VERSION}"

    def complete() -> bool:
        return (os.access(home / "bin" / "training-operator", os.X_OK)
                and (home / "crds" / "kubeflow.org_tfjobs.yaml").is_file()
                and (home / "webhook" / "manifests.yaml").is_file())

    return ensure_built(f"training-operator {TRAINING_OPERATOR_VERSION}", home, complete,
                        SCRIPT_NAME, env={"TRAINING_OPERATOR_VERSION": TRAINING_OPERATOR_VERSION},
                        build=build, nice=True)


@dataclass
class TrainingOperator:
    """What one control plane needs to run training-operator (see the module docstring):
    :meth:`install` before a phase, :meth:`command` for ``bench.operator.OperatorProcess``,
    :meth:`uninstall` after it (so the API server stops calling its webhooks)."""

    plane: ControlPlane
    home: Path
    workdir: Path
    webhook_port: int

    @classmethod
    def prepare(cls, plane: ControlPlane, workdir: Path) -> TrainingOperator:
        """Find (or build) the binary and make the certificates; installs nothing yet."""
        home = find_training_operator()
        op = cls(plane, home, workdir, free_ports(1)[0])
        op._make_certs()
        return op

    @property
    def tmpdir(self) -> Path:
        return self.workdir / "tmp"

    @property
    def certs(self) -> Path:
        return self.workdir / "certs"

    def command(self, flags: str) -> str:
        """An ``OperatorProcess`` template: its readiness on ``{port}`` (``/readyz`` answers
        once the certificates are in place and the webhook server listens), its cache limited
        to ``{namespace}`` as ours is, metrics off, and ``flags``."""
        binary = self.home / "bin" / "training-operator"
        return (f"env TMPDIR={self.tmpdir} MY_POD_NAMESPACE={NAMESPACE} "
                f"KUBECONFIG={{kubeconfig}} {binary} "
                f"--health-probe-bind-address 127.0.0.1:{{port}} --metrics-bind-address 0 "
                f"--webhook-server-port {self.webhook_port} --namespace {{namespace}} "
                f"--zap-log-level info {flags}")

    def _make_certs(self) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise ControlPlaneError("'openssl' is required to make training-operator's certs")
        self.certs.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = self.certs / "ca.key", self.certs / "ca.crt"
        _run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
              "-keyout", str(ca_key), "-out", str(ca_cert),
              "-subj", f"/O=training-operator/CN={CA_NAME}",
              "-addext", f"subjectAltName=DNS:{CA_NAME}",
              "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,digitalSignature,keyEncipherment"])
        _run([openssl, "rsa", "-in", str(ca_key), "-traditional",
              "-out", str(self.certs / "ca.pkcs1.key")])
        serving = self.tmpdir / "k8s-webhook-server" / "serving-certs"
        make_serving_cert(serving, subject="/CN=training-operator", ca_cert=ca_cert,
                          ca_key=ca_key, sans=(f"DNS:{SERVICE_DNS}", "IP:127.0.0.1"))
        _ensure_fixed_cert(serving)

    def install(self) -> None:
        """Its CRDs (replacing any other kubeflow.org ones), namespace, Secret and validating
        webhooks, pointed at 127.0.0.1."""
        apply_crds(self.plane.kubeconfig, self.home / "crds",
                   kubectl=self.plane.bin_dir / "kubectl", timeout=120, wait_published=False)
        serving = self.tmpdir / "k8s-webhook-server" / "serving-certs"
        ca = (self.certs / "ca.crt").read_bytes()
        secret = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
            "data": {name: base64.b64encode(data).decode() for name, data in {
                "ca.crt": ca, "ca.key": (self.certs / "ca.pkcs1.key").read_bytes(),
                "tls.crt": (serving / "tls.crt").read_bytes(),
                "tls.key": (serving / "tls.key").read_bytes()}.items()},
        }
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._apply([namespace, secret, self._webhooks(base64.b64encode(ca).decode())],
                    "install.json")
        log(f"training-operator {TRAINING_OPERATOR_VERSION}: CRDs, Secret and webhooks "
            f"installed (webhook on port {self.webhook_port})")

    def _webhooks(self, ca_bundle: str) -> dict[str, Any]:
        config: dict[str, Any] = yaml.safe_load(
            (self.home / "webhook" / "manifests.yaml").read_text())
        config["metadata"] = {"name": WEBHOOK_CONFIGURATION}
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}",
                                    "caBundle": ca_bundle}
        return config

    def _apply(self, objects: list[dict[str, Any]], name: str) -> None:
        path = self.workdir / name
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        self.plane.kubectl("apply", "--server-side", "--force-conflicts",
                           "--field-manager=trainjobs-bench", "-f", str(path))

    def uninstall(self) -> None:
        """Delete its webhook configuration (its CRDs and the jobs stay)."""
        self.plane.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION,
                           "--ignore-not-found", check=False)


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{' '.join(cmd[:3])}... exited {done.returncode}: "
                                f"{done.stderr.strip()}")


def _ensure_fixed_cert(source: Path, directory: Path = FIXED_CERT_DIR) -> None:
    """``tls.crt``/``tls.key`` at the rotator's fixed path (only their existence is read),
    renamed into place whole so that concurrent runs never see half."""
    if (directory / "tls.crt").is_file():
        return
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".certs-", dir=directory.parent))
    except OSError as exc:
        raise ControlPlaneError(
            f"training-operator's cert rotator waits for {directory}/tls.crt (a fixed path in "
            f"its pkg/cert/cert.go) and this user cannot create it: {exc}") from exc
    try:
        for name in ("tls.crt", "tls.key"):
            shutil.copyfile(source / name, tmp / name)
        tmp.chmod(0o755)
        with contextlib.suppress(OSError):
            tmp.rename(directory)
        if not (directory / "tls.crt").is_file():
            raise ControlPlaneError(f"could not create {directory}/tls.crt")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
