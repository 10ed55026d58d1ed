"""Install CustomResourceDefinitions into a test control plane and wait until they serve."""

from __future__ import annotations

from pathlib import Path

from trainjobs.testing._binaries import find_binaries
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubectl import run_kubectl

_CRD_PREFIX = "customresourcedefinition.apiextensions.k8s.io/"


def apply_crds(
    kubeconfig: Path,
    path: Path,
    *,
    kubectl: Path | None = None,
    timeout: float = 60.0,
) -> list[str]:
    """Server-side apply the manifests at ``path`` (a file or a directory, recursively) and
    wait until every CustomResourceDefinition among them is Established.

    Returns the names of the CRDs (``plural.group``). Raises :class:`ControlPlaneError`
    (a :class:`KubectlError` for a kubectl failure) when apply or the wait fails.
    """
    kubectl = kubectl or find_binaries() / "kubectl"
    if not path.exists():
        raise ControlPlaneError(f"no CRD manifests at {path}")
    recursive = ["-R"] if path.is_dir() else []
    applied = run_kubectl(
        kubectl,
        kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=trainjobs-tests",
        "-f",
        str(path),
        *recursive,
        "-o",
        "name",
        timeout=timeout,
    )
    crds = [
        line.strip() for line in applied.stdout.splitlines() if line.strip().startswith(_CRD_PREFIX)
    ]
    if crds:
        run_kubectl(
            kubectl,
            kubeconfig,
            "wait",
            "--for=condition=Established",
            f"--timeout={int(timeout)}s",
            *crds,
            timeout=timeout + 10,
        )
    return [name.removeprefix(_CRD_PREFIX) for name in crds]
