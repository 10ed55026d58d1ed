"""Test support: a real Kubernetes control plane with KWOK fake nodes, for this project's
tests and for third-party plugin authors.

``ControlPlane.start(workdir)`` runs etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK on 127.0.0.1 (free ports) and waits until nodes are Ready;
``python -m trainjobs.testing.cluster up|down`` does the same from a shell, and the pytest
plugin ``trainjobs.testing.pytest_plugin`` offers it as the session fixture ``kube_cluster``.
Pods on the fake nodes run until told to end by annotations (see ``kwok_stages.yaml``):
``EXIT_CODE_ANNOTATION``, ``RUN_DURATION_ANNOTATION``, ``FAIL_TIMES_ANNOTATION``.
"""

from __future__ import annotations

from trainjobs.testing._binaries import K8S_VERSION, KWOK_VERSION, find_binaries
from trainjobs.testing._controlplane import (
    EXIT_CODE_ANNOTATION,
    FAIL_TIMES_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    ClusterOptions,
    ControlPlane,
    stages_file,
)
from trainjobs.testing._crds import apply_crds
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._gang import GANG_SCHEDULERS, find_gang_scheduler
from trainjobs.testing._kubectl import KubectlError
from trainjobs.testing._state import stop_control_plane

__all__ = [
    "EXIT_CODE_ANNOTATION",
    "FAIL_TIMES_ANNOTATION",
    "GANG_SCHEDULERS",
    "K8S_VERSION",
    "KWOK_VERSION",
    "RUN_DURATION_ANNOTATION",
    "ClusterOptions",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "apply_crds",
    "find_binaries",
    "find_gang_scheduler",
    "stages_file",
    "stop_control_plane",
]
