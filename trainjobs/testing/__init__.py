"""Test support: a real Kubernetes control plane with KWOK fake nodes, for this project's
tests and for third-party plugin authors.

``ControlPlane.start(workdir)`` runs etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK on 127.0.0.1 (free ports) and waits until nodes are Ready;
``python -m trainjobs.testing.cluster up|down`` does the same from a shell, and the pytest
plugin ``trainjobs.testing.pytest_plugin`` offers it as the session fixture ``kube_cluster``.
Pods on the fake nodes run until told to end by annotations (see ``kwok_stages.yaml``):
``EXIT_CODE_ANNOTATION``, ``RUN_DURATION_ANNOTATION``, ``FAIL_TIMES_ANNOTATION``.
``ClusterOptions(audit_policy=AUDIT_WRITES)`` turns on the API server's audit log
(``ControlPlane.audit_events``, ``pod_histories``); ``ControlPlane.restart("kube-apiserver")``
(or etcd, or any component) is a supported outage, and ``ControlPlane.dead()`` names a
component that died on its own (the pytest plugin fails the test that saw it).
"""

from __future__ import annotations

from trainjobs.testing._audit import (
    AUDIT_WRITES,
    AUDIT_WRITES_AND_POD_DELETES,
    PodHistory,
    PodWrite,
    agent_of,
    pod_histories,
)
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
    "AUDIT_WRITES",
    "AUDIT_WRITES_AND_POD_DELETES",
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
    "PodHistory",
    "PodWrite",
    "agent_of",
    "apply_crds",
    "find_binaries",
    "find_gang_scheduler",
    "pod_histories",
    "stages_file",
    "stop_control_plane",
]
