"""Kueue's names, as v0.19.2 spells them (file references are to that tag).

Why copied rather than configurable: they are Kueue's API; a mismatch would make Kueue ignore
the job or the operator ignore Kueue.
"""

from __future__ import annotations

__all__ = [
    "ANNOTATION_ADMISSION_GATED_BY",
    "ANNOTATION_PODSET_UNCONSTRAINED_TOPOLOGY",
    "ANNOTATION_PREBUILT_WORKLOAD",
    "ANNOTATION_WORKLOAD",
    "API_VERSION",
    "CHECK_STATE_PENDING",
    "CHECK_STATE_READY",
    "COND_ADMITTED",
    "COND_EVICTED",
    "COND_FINISHED",
    "COND_PODS_READY",
    "COND_QUOTA_RESERVED",
    "COND_REQUEUED",
    "DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR",
    "DEFAULT_PRIORITY",
    "FINALIZER_RESOURCE_IN_USE",
    "GROUP",
    "LABEL_CLUSTER_QUEUE",
    "LABEL_JOB_UID",
    "LABEL_LOCAL_QUEUE",
    "LABEL_MAX_EXEC_TIME_SECONDS",
    "LABEL_MULTIKUEUE_ORIGIN",
    "LABEL_MULTIKUEUE_WORKER_POD",
    "LABEL_PODSET",
    "LABEL_PREBUILT_WORKLOAD",
    "LABEL_PRIORITY_CLASS",
    "LABEL_QUEUE_NAME",
    "MANAGED_BY_MULTIKUEUE",
    "MAX_POD_SETS",
    "TOPOLOGY_SCHEDULING_GATE",
    "VERSION",
]

GROUP = "kueue.x-k8s.io"
# The served storage version (config/components/crd/bases/kueue.x-k8s.io_workloads.yaml:
# v1beta1 served, storage false; v1beta2 served, storage true).
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"

# pkg/controller/constants/constants.go
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
LABEL_PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
ANNOTATION_PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"
LABEL_MAX_EXEC_TIME_SECONDS = "kueue.x-k8s.io/max-exec-time-seconds"
# pkg/constants/constants.go
LABEL_PODSET = "kueue.x-k8s.io/podset"
LABEL_LOCAL_QUEUE = "kueue.x-k8s.io/local-queue-name"
LABEL_CLUSTER_QUEUE = "kueue.x-k8s.io/cluster-queue-name"
ANNOTATION_ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
DEFAULT_PRIORITY = 0  # constants.DefaultPriority
# apis/kueue/v1beta2/constants.go, multikueue_types.go, topology_types.go
FINALIZER_RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
LABEL_MULTIKUEUE_ORIGIN = "kueue.x-k8s.io/multikueue-origin"
LABEL_MULTIKUEUE_WORKER_POD = "kueue.x-k8s.io/multikueue-worker-workload-pod"
ANNOTATION_WORKLOAD = "kueue.x-k8s.io/workload"
ANNOTATION_PODSET_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
TOPOLOGY_SCHEDULING_GATE = "kueue.x-k8s.io/topology"
# apis/kueue/v1beta2/workload_types.go: spec.podSets MaxItems
MAX_POD_SETS = 18

# Workload condition types (workload_types.go)
COND_QUOTA_RESERVED = "QuotaReserved"
COND_ADMITTED = "Admitted"
COND_EVICTED = "Evicted"
COND_FINISHED = "Finished"
COND_PODS_READY = "PodsReady"
COND_REQUEUED = "Requeued"
CHECK_STATE_READY = "Ready"
CHECK_STATE_PENDING = "Pending"

#: Kueue's default managedJobsNamespaceSelector (apis/config/v1beta2/defaults.go:124, Kueue's
#: own namespace at its default, kueue-system), in label-selector string form.
DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR = (
    "kubernetes.io/metadata.name notin (kube-system,kueue-system)")
