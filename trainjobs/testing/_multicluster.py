"""Several control planes side by side for Kueue's MultiKueue: one manager, N workers
(``MultiCluster.start``, the pytest fixture ``multi_cluster``).

Why: MultiKueue dispatches a job created in a manager cluster to a worker cluster that has
room and copies the worker's status back; proving that a job runs in exactly one cluster
needs real clusters. Each is a whole :class:`ControlPlane` (its own etcd, API server,
scheduler, controller manager, KWOK nodes, Kueue v0.19.2), on free 127.0.0.1 ports, in a
directory of its own under the workdir, all stopped by :meth:`MultiCluster.stop`.

The manager's Kueue is configured for MultiKueue as Kueue v0.19.2 reads it
(``apis/config/v1beta2/configuration_types.go``, ``MultiKueue``): ``multiKueue.gcInterval``,
``origin``, ``workerLostTimeout``, and ``multiKueue.externalFrameworks`` (``Kind.version.group``
of kinds dispatched by the generic adapter, which reads ``.spec.managedBy``). Feature gates:
``MultiKueue`` and ``MultiKueueAdaptersForCustomJobs`` are beta and on by default in v0.19.2
(``pkg/features/kube_features.go``); the harness sets both to true anyway, so a Kueue whose
defaults differ still runs what the tests expect. Each worker is connected by a Secret in
``kueue-system`` holding its admin kubeconfig (certificates inline: Kueue refuses file paths
and insecure TLS, ``validateKubeconfig``) under the key ``kubeconfig``, and a MultiKueueCluster
naming it; one MultiKueueConfig lists every worker, one AdmissionCheck (controllerName
``kueue.x-k8s.io/multikueue``) points at it. :meth:`MultiCluster.create_queues` makes the
same ResourceFlavor, ClusterQueue and LocalQueue in every cluster (the manager's
ClusterQueue with the AdmissionCheck): MultiKueue creates the job and its Workload in the
worker under the same namespace and LocalQueue name.

Start-up is sequential: each control plane's daemons are tied to the thread that started them
(``PR_SET_PDEATHSIG``), so none may be started from a thread that ends.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from trainjobs.kube.errors import ApiError
from trainjobs.testing._controlplane import ClusterOptions, ControlPlane
from trainjobs.testing._crds import apply_crds
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubeapi import failure
from trainjobs.testing._kueue import KUEUE_NAMESPACE, Kueue, KueueOptions
from trainjobs.testing._kueue_objects import (
    GROUP_VERSION,
    KueueObjectError,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
)

__all__ = ["MULTIKUEUE_CONTROLLER", "MultiCluster", "MultiClusterOptions",
           "QueueNames"]

#: The AdmissionCheck controllerName of MultiKueue (and the managedBy value it sets).
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
_BASE = f"/apis/{GROUP_VERSION}"


@dataclass(frozen=True)
class MultiClusterOptions:
    """What to start: the manager, ``workers`` workers (``worker`` options each, or one entry
    of ``worker_options`` per worker), and the Kueue settings of both."""

    workers: int = 2
    manager: ClusterOptions = field(default_factory=lambda: ClusterOptions(nodes=1))
    worker: ClusterOptions = field(default_factory=lambda: ClusterOptions(nodes=1))
    #: One per worker, replacing ``worker`` (e.g. one small worker and one large).
    worker_options: tuple[ClusterOptions, ...] = ()
    #: Every cluster's Kueue (integrations, external frameworks, waitForPodsReady).
    kueue: KueueOptions = field(default_factory=KueueOptions)
    #: ``multiKueue.externalFrameworks`` of the manager: ``Kind.version.group``.
    external_frameworks: tuple[str, ...] = ()
    gc_interval: str = "30s"
    origin: str = "multikueue"
    worker_lost_timeout: str = "15m"
    #: Merged last into the manager's ``multiKueue`` section (e.g. ``dispatcherName``).
    multikueue_extra: Mapping[str, Any] = field(default_factory=dict)
    #: Directories of CRDs applied to every cluster before its Kueue starts (MultiKueue's
    #: adapters watch their kinds in the workers from the moment a cluster connects).
    crds: tuple[Path, ...] = ()

    def worker_names(self) -> list[str]:
        return [f"worker{i + 1}" for i in range(self.workers)]

    def options_of_worker(self, index: int) -> ClusterOptions:
        return self.worker_options[index] if self.worker_options else self.worker

    def manager_kueue(self) -> KueueOptions:
        """The manager's Kueue options: the shared ones plus the MultiKueue section."""
        multikueue: dict[str, Any] = {
            "gcInterval": self.gc_interval,
            "origin": self.origin,
            "workerLostTimeout": self.worker_lost_timeout,
            "externalFrameworks": [{"name": n} for n in self.external_frameworks],
            **self.multikueue_extra,
        }
        gates = {**self.kueue.feature_gates, "MultiKueue": True,
                 "MultiKueueAdaptersForCustomJobs": True}
        external = tuple(dict.fromkeys((*self.kueue.external_frameworks,
                                        *self.external_frameworks)))
        return replace(self.kueue, feature_gates=gates, external_frameworks=external,
                       extra={**self.kueue.extra, "multiKueue": multikueue})

    def worker_kueue(self) -> KueueOptions:
        external = tuple(dict.fromkeys((*self.kueue.external_frameworks,
                                        *self.external_frameworks)))
        return replace(self.kueue, external_frameworks=external)


@dataclass(frozen=True)
class QueueNames:
    """The names :meth:`MultiCluster.create_queues` gave the same objects in every cluster."""

    namespace: str
    flavor: str
    cluster_queue: str
    local_queue: str


class MultiCluster:
    """A manager and its workers, running. Attributes: ``manager``, ``workers`` (name ->
    :class:`ControlPlane`), ``options``, ``timings`` (seconds per cluster to start and for the
    MultiKueue objects). :meth:`stop` stops every process of every cluster."""

    def __init__(self, workdir: Path, options: MultiClusterOptions) -> None:
        self.workdir = workdir
        self.options = options
        self.manager: ControlPlane | None = None
        self.workers: dict[str, ControlPlane] = {}
        self.timings: dict[str, float] = {}
        self.admission_check = "multikueue"
        self.config_name = "multikueue"

    @property
    def planes(self) -> list[ControlPlane]:
        """Every started cluster, the manager first."""
        return [p for p in (self.manager, *self.workers.values()) if p is not None]

    def plane(self, name: str) -> ControlPlane:
        """``"manager"`` or a worker's name."""
        if name == "manager" and self.manager is not None:
            return self.manager
        if name in self.workers:
            return self.workers[name]
        raise ControlPlaneError(f"no cluster {name!r} (have manager, {', '.join(self.workers)})")

    @classmethod
    def start(cls, workdir: Path, options: MultiClusterOptions | None = None, *,
              bin_dir: Path | None = None, timeout: float = 300.0) -> MultiCluster:
        """Start the workers, then the manager, connect them, and wait until every
        MultiKueueCluster is Active and the AdmissionCheck Active; on failure everything
        started is stopped and the error names the cluster and its component's log."""
        options = options or MultiClusterOptions()
        clusters = cls(workdir.resolve(), options)
        t0 = time.monotonic()
        try:
            for i, name in enumerate(options.worker_names()):
                started = time.monotonic()
                clusters.workers[name] = clusters._start_one(
                    name, options.options_of_worker(i), options.worker_kueue(), bin_dir)
                clusters.timings[name] = time.monotonic() - started
            started = time.monotonic()
            clusters.manager = clusters._start_one(
                "manager", options.manager, options.manager_kueue(), bin_dir)
            clusters.timings["manager"] = time.monotonic() - started
            started = time.monotonic()
            clusters.connect(deadline=t0 + timeout)
            clusters.timings["connected"] = time.monotonic() - started
        except BaseException:
            with contextlib.suppress(ControlPlaneError):
                clusters.stop()
            raise
        clusters.timings["total"] = time.monotonic() - t0
        return clusters

    def _start_one(self, name: str, options: ClusterOptions, kueue: KueueOptions,
                   bin_dir: Path | None) -> ControlPlane:
        """One cluster: its control plane, the CRDs of ``crds``, then its Kueue."""
        plane = ControlPlane.start(self.workdir / name,
                                   replace(options, node_prefix=f"{name}-node", kueue=None),
                                   bin_dir=bin_dir)
        # Registered at once, so that stop() stops it even when what follows fails.
        if name == "manager":
            self.manager = plane
        else:
            self.workers[name] = plane
        for directory in self.options.crds:
            apply_crds(plane.kubeconfig, directory, kubectl=plane.bin_dir / "kubectl")
        plane.kueue = Kueue.start(plane, kueue)
        return plane

    # -- MultiKueue objects -------------------------------------------------------------------

    def connect(self, deadline: float) -> None:
        """The workers' kubeconfig Secrets and MultiKueueClusters, the MultiKueueConfig and
        the AdmissionCheck in the manager; returns once Kueue says they are all Active."""
        manager = self.plane("manager")
        for name, worker in self.workers.items():
            self._post(manager, f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets", {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": f"{name}-kubeconfig", "namespace": KUEUE_NAMESPACE},
                "data": {"kubeconfig": base64.b64encode(
                    worker.kubeconfig.read_bytes()).decode()}})
            self._post(manager, f"{_BASE}/multikueueclusters", {
                "apiVersion": GROUP_VERSION, "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {"clusterSource": {"kubeConfig": {
                    "locationType": "Secret", "location": f"{name}-kubeconfig"}}}})
        self._post(manager, f"{_BASE}/multikueueconfigs", {
            "apiVersion": GROUP_VERSION, "kind": "MultiKueueConfig",
            "metadata": {"name": self.config_name},
            "spec": {"clusters": list(self.workers)}})
        self._post(manager, f"{_BASE}/admissionchecks", {
            "apiVersion": GROUP_VERSION, "kind": "AdmissionCheck",
            "metadata": {"name": self.admission_check},
            "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": {
                "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                "name": self.config_name}}})
        for name in self.workers:
            manager.wait_until(functools.partial(self.active, "multikueueclusters", name),
                               f"MultiKueueCluster {name} Active", deadline)
        manager.wait_until(lambda: self.active("admissionchecks", self.admission_check),
                           f"AdmissionCheck {self.admission_check} Active", deadline)

    def active(self, plural: str, name: str) -> bool:
        """The manager's MultiKueueCluster or AdmissionCheck ``name`` has Active True."""
        obj = self._get(self.plane("manager"), f"{_BASE}/{plural}/{name}")
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)

    def condition(self, plural: str, name: str, type_: str = "Active") -> dict[str, Any] | None:
        """A condition of a manager's MultiKueue object, as Kueue wrote it (None: none)."""
        obj = self._get(self.plane("manager"), f"{_BASE}/{plural}/{name}")
        for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == type_:
                found: dict[str, Any] = cond
                return found
        return None

    def create_namespace(self, name: str) -> None:
        """Namespace ``name`` in every cluster (MultiKueue creates the job in the worker
        under the manager's namespace, which must exist there)."""
        for plane in self.planes:
            plane.kubectl("create", "namespace", name)

    def delete_namespace(self, name: str) -> None:
        for plane in self.planes:
            plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found",
                          check=False)

    def create_queues(self, namespace: str, *, manager_quota: Mapping[str, str],
                      worker_quotas: Sequence[Mapping[str, str]] | Mapping[str, str],
                      prefix: str = "mk") -> QueueNames:
        """The same ResourceFlavor, ClusterQueue and LocalQueue (``queue``) in every cluster:
        the manager's ClusterQueue has ``manager_quota`` and the MultiKueue AdmissionCheck;
        each worker's the quota of ``worker_quotas`` (one mapping for all, or one each)."""
        names = QueueNames(namespace, f"{prefix}-flavor", f"{prefix}-cq", "queue")
        quotas = ([worker_quotas] * len(self.workers) if isinstance(worker_quotas, Mapping)
                  else list(worker_quotas))
        if len(quotas) != len(self.workers):
            raise ControlPlaneError(f"{len(quotas)} worker quotas for {len(self.workers)} "
                                    "workers")
        targets: list[tuple[ControlPlane, Mapping[str, str], dict[str, Any] | None]] = [
            (self.plane("manager"), manager_quota, {"admissionChecksStrategy": {
                "admissionChecks": [{"name": self.admission_check}]}})]
        targets += [(w, q, None) for w, q in zip(self.workers.values(), quotas, strict=True)]
        for plane, quota, extra in targets:
            create_resource_flavor(plane, names.flavor)
            create_cluster_queue(plane, names.cluster_queue, quotas={names.flavor: quota},
                                 extra_spec=extra)
            create_local_queue(plane, namespace, names.local_queue, names.cluster_queue)
        return names

    def delete_queues(self, names: QueueNames) -> None:
        """The queue objects of :meth:`create_queues` (after the jobs using them)."""
        for plane in self.planes:
            for args in (("localqueue", names.local_queue, "-n", names.namespace),
                         ("clusterqueue", names.cluster_queue),
                         ("resourceflavor", names.flavor)):
                plane.kubectl("delete", *args, "--ignore-not-found", "--wait=true",
                              check=False, timeout=60)

    # -- plumbing -----------------------------------------------------------------------------

    @staticmethod
    def _post(plane: ControlPlane, path: str, body: dict[str, Any]) -> None:
        try:
            plane.api().call("POST", path, body)
        except ApiError as exc:
            raise KueueObjectError(failure("POST", path, exc)) from exc

    @staticmethod
    def _get(plane: ControlPlane, path: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = plane.api().call("GET", path)
        except ApiError:
            return None
        return got

    # -- health and stop ----------------------------------------------------------------------

    def dead(self) -> list[str]:
        """One line per component of any cluster that died, prefixed with the cluster."""
        named = [("manager", self.manager), *self.workers.items()]
        return [f"{name}: {line}" for name, plane in named if plane is not None
                for line in plane.dead()]

    def check_alive(self) -> None:
        dead = self.dead()
        if dead:
            raise ControlPlaneError("multi-cluster component died: " + "\n".join(dead))

    def stop(self) -> None:
        """Stop every cluster (the manager first, so MultiKueue stops calling the workers).
        Idempotent; raises naming what is still running after all were tried."""
        errors = []
        for plane in self.planes:
            try:
                plane.stop()
            except ControlPlaneError as exc:
                errors.append(f"{plane.workdir.name}: {exc}")
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
