"""The admin kubeconfig of a test control plane, and running the matching kubectl against it."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._pki import Pki

CLUSTER_NAME = "trainjobs-test"
USER_NAME = "trainjobs-admin"


class KubectlError(ControlPlaneError):
    """``kubectl`` exited non-zero; ``command``, ``returncode``, ``stdout`` and ``stderr`` say
    how."""

    def __init__(self, command: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(f"kubectl {' '.join(command)} exited {returncode}: {stderr.strip()}")


def write_kubeconfig(path: Path, server: str, pki: Pki) -> None:
    """A self-contained kubeconfig (certificates inline) for the ``system:masters`` admin."""

    def b64(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    cluster = {"server": server, "certificate-authority-data": b64(pki.ca_cert)}
    user = {
        "client-certificate-data": b64(pki.admin_cert),
        "client-key-data": b64(pki.admin_key),
    }
    context = {"cluster": CLUSTER_NAME, "user": USER_NAME, "namespace": "default"}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": cluster}],
        "users": [{"name": USER_NAME, "user": user}],
        "contexts": [{"name": CLUSTER_NAME, "context": context}],
        "current-context": CLUSTER_NAME,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def run_kubectl(
    kubectl: Path,
    kubeconfig: Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``kubectl --kubeconfig KUBECONFIG ARGS...``; its discovery cache lives beside the
    kubeconfig (never in ``~/.kube``) and ``$KUBECONFIG`` is ignored. Raises
    :class:`KubectlError` on a non-zero exit unless ``check`` is false."""
    argv = [
        str(kubectl),
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={kubeconfig.parent / 'kubectl-cache'}",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    result = subprocess.run(
        argv, input=input, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise KubectlError(args, result.returncode, result.stdout, result.stderr)
    return result
