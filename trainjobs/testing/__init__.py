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
``ClusterOptions(kueue=KueueOptions())`` (or ``Kueue.start(plane)``, the pytest fixture
``kueue``) adds Kueue v0.19.2 with its CRDs and webhooks; ``create_cluster_queue`` and the
other functions of ``_kueue_objects`` build its queues and read Workloads.
``MultiCluster.start(workdir)`` (the fixture ``multi_cluster``) runs a MultiKueue manager and
workers, each a whole control plane with Kueue, connected as MultiKueue needs.
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
from trainjobs.testing._kueue import (
    KUEUE_VERSION,
    Kueue,
    KueueOptions,
    WaitForPodsReady,
    find_kueue,
    kueue_configuration,
)
from trainjobs.testing._kueue_objects import (
    QUEUE_LABEL,
    WORKLOAD_PRIORITY_CLASS_LABEL,
    KueueObjectError,
    WorkloadCondition,
    condition_true,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
    create_workload_priority_class,
    get_workload,
    wait_for_workload,
    workload_condition,
    workload_conditions,
    workloads_owned_by,
)
from trainjobs.testing._multicluster import (
    MULTIKUEUE_CONTROLLER,
    MultiCluster,
    MultiClusterOptions,
    QueueNames,
)
from trainjobs.testing._state import stop_control_plane

__all__ = [
    "AUDIT_WRITES",
    "AUDIT_WRITES_AND_POD_DELETES",
    "EXIT_CODE_ANNOTATION",
    "FAIL_TIMES_ANNOTATION",
    "GANG_SCHEDULERS",
    "K8S_VERSION",
    "KUEUE_VERSION",
    "KWOK_VERSION",
    "MULTIKUEUE_CONTROLLER",
    "QUEUE_LABEL",
    "RUN_DURATION_ANNOTATION",
    "WORKLOAD_PRIORITY_CLASS_LABEL",
    "ClusterOptions",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "Kueue",
    "KueueObjectError",
    "KueueOptions",
    "MultiCluster",
    "MultiClusterOptions",
    "PodHistory",
    "PodWrite",
    "QueueNames",
    "WaitForPodsReady",
    "WorkloadCondition",
    "agent_of",
    "apply_crds",
    "condition_true",
    "create_cluster_queue",
    "create_local_queue",
    "create_resource_flavor",
    "create_workload_priority_class",
    "find_binaries",
    "find_gang_scheduler",
    "find_kueue",
    "get_workload",
    "kueue_configuration",
    "pod_histories",
    "stages_file",
    "stop_control_plane",
    "wait_for_workload",
    "workload_condition",
    "workload_conditions",
    "workloads_owned_by",
]
