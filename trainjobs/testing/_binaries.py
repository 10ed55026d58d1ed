"""Find (or build) the pinned control-plane binaries.

The control plane used by the tests is built from Go modules by ``build-control-plane.sh``
into a cache outside the repository (``$TRAINJOBS_CACHE``, default ``~/.cache/trainjobs``).
This module only decides *where* the binaries are and runs the build script when they are
missing; it never downloads anything itself. ``TRAINJOBS_CONTROL_PLANE_BIN`` points at a
ready-made bin dir and skips the build entirely.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from trainjobs.testing._errors import ControlPlaneError

K8S_VERSION = "v1.36.3"
KWOK_VERSION = "v0.8.0"
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)
BIN_ENV = "TRAINJOBS_CONTROL_PLANE_BIN"
SCRIPT_NAME = "build-control-plane.sh"


def cache_root() -> Path:
    """The cache directory shared by every checkout (``$TRAINJOBS_CACHE``)."""
    env = os.environ.get("TRAINJOBS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "trainjobs"


def default_bin_dir() -> Path:
    """Where the build script puts the pinned binaries."""
    return cache_root() / "control-plane" / f"k8s-{K8S_VERSION}-kwok-{KWOK_VERSION}" / "bin"


def missing_binaries(bin_dir: Path) -> list[str]:
    """Names of the required binaries that are not executable files in ``bin_dir``."""
    return [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


def build_script(name: str = SCRIPT_NAME) -> Path | None:
    """A build script: shipped in this package, or in the repository's ``scripts/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / name, here.parents[1] / "scripts" / name):
        if candidate.is_file():
            return candidate
    return None


def ensure_built(what: str, home: Path, complete: Callable[[], bool], script_name: str,
                 *args: str, env: Mapping[str, str] | None = None, build: bool = True,
                 nice: bool = False) -> Path:
    """`home` once `complete()` finds everything there: at once, or after its build script
    (``scripts/<script_name> <args>``, progress on stderr; minutes to tens of minutes) when
    `build` allows. `what` names it in the errors; `nice` runs the build at nice 19."""
    if complete():
        return home
    script = build_script(script_name)
    command = " ".join(["scripts/" + script_name, *args])
    if not build or script is None:
        raise ControlPlaneError(f"{what} is not built in {home}: run {command}")
    argv = [*(("nice", "-n", "19") if nice else ()), "bash", str(script), *args]
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, stdout=2, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"{command} failed (exit status {result.returncode})")
    if not complete():
        raise ControlPlaneError(f"{command} finished but {what} is incomplete in {home}")
    return home


def find_binaries(*, build: bool = True) -> Path:
    """Return a bin dir holding every control-plane binary, building them if allowed.

    Order: ``$TRAINJOBS_CONTROL_PLANE_BIN`` (must be complete), the cache, then the build
    script (tens of minutes on a cold Go cache; it prints its progress).
    """
    env = os.environ.get(BIN_ENV)
    if env:
        bin_dir = Path(env).expanduser()
        missing = missing_binaries(bin_dir)
        if missing:
            raise ControlPlaneError(
                f"{BIN_ENV}={env} lacks {', '.join(missing)}; point it at the bin dir printed "
                f"by {SCRIPT_NAME}, or unset it to use the cache"
            )
        return bin_dir
    bin_dir = default_bin_dir()
    if not missing_binaries(bin_dir):
        return bin_dir
    if not build:
        raise ControlPlaneError(
            f"control-plane binaries missing in {bin_dir}: run scripts/{SCRIPT_NAME}"
        )
    script = build_script()
    if script is None:
        raise ControlPlaneError(
            f"control-plane binaries missing in {bin_dir} and {SCRIPT_NAME} not found; "
            f"set {BIN_ENV} to a bin dir holding {', '.join(BINARIES)}"
        )
    _run_build(script)  # the script takes a lock: concurrent sessions build once
    missing = missing_binaries(bin_dir)
    if missing:
        raise ControlPlaneError(f"{script} finished but {', '.join(missing)} missing in {bin_dir}")
    return bin_dir


def _run_build(script: Path) -> None:
    env = dict(os.environ, K8S_VERSION=K8S_VERSION, KWOK_VERSION=KWOK_VERSION)
    # The build takes tens of minutes on a cold cache: its progress goes to stderr (fd 2), so
    # the caller's stdout (``up`` prints the kubeconfig path there) stays clean.
    result = subprocess.run(["bash", str(script)], env=env, stdout=2, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"{script} failed with exit status {result.returncode}")
