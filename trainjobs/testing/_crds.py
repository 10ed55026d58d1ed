"""Install CustomResourceDefinitions into a test control plane and wait until they serve."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

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
    wait_published: bool = True,
) -> list[str]:
    """Server-side apply the manifests at ``path`` (a file or a directory, recursively) and
    wait until every CustomResourceDefinition among them is Established and its schema is
    published in the API server's OpenAPI v3 document (what ``kubectl explain`` reads: it
    follows Established by up to a few seconds).

    ``wait_published=False`` stops at Established: enough for a controller (Kueue) that
    only needs the API served, not for ``kubectl explain``.

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
        deadline = time.monotonic() + timeout
        items = _wait_established(kubectl, kubeconfig, crds, deadline)
        if wait_published:
            _wait_published(kubectl, kubeconfig, items, deadline)
    return [name.removeprefix(_CRD_PREFIX) for name in crds]


def _wait_established(kubectl: Path, kubeconfig: Path, crds: list[str], deadline: float
                      ) -> list[dict[str, Any]]:
    """Poll until every CRD is Established; returns their objects. (`kubectl wait` fails at
    once with "conditions accessor error" when asked before the API server wrote a new CRD's
    first condition.)"""
    names = {c.removeprefix(_CRD_PREFIX) for c in crds}
    while True:
        listing = json.loads(run_kubectl(kubectl, kubeconfig, "get", "crd", "-o", "json").stdout)
        ready = {
            item["metadata"]["name"] for item in listing.get("items", [])
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (item.get("status") or {}).get("conditions") or [])
        }
        if ready >= names:
            return [item for item in listing.get("items", [])
                    if item["metadata"]["name"] in names]
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"CRDs not Established in time: {sorted(names - ready)}")
        time.sleep(0.2)


def _wait_published(kubectl: Path, kubeconfig: Path, crds: list[dict[str, Any]],
                    deadline: float) -> None:
    """Poll until each served version of each CRD has its kind's schema in
    ``/openapi/v3/apis/<group>/<version>``."""
    wanted: dict[str, set[str]] = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec.get("versions") or []:
            if version.get("served"):
                wanted.setdefault(f"{spec['group']}/{version['name']}", set()).add(
                    f".{version['name']}.{spec['names']['kind']}")
    while wanted:
        for group_version, suffixes in list(wanted.items()):
            got = run_kubectl(kubectl, kubeconfig, "get", "--raw",
                              f"/openapi/v3/apis/{group_version}", check=False)
            if got.returncode == 0:
                schemas = (json.loads(got.stdout).get("components") or {}).get("schemas") or {}
                suffixes -= {s for s in suffixes if any(k.endswith(s) for k in schemas)}
            if not suffixes:
                del wanted[group_version]
        if not wanted:
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"CRD schemas not published in /openapi/v3 in time: "
                                    f"{ {gv: sorted(s) for gv, s in wanted.items()} }")
        time.sleep(0.2)
