"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, controller manager,
scheduler and KWOK with fake nodes.

Why: the operator is tested against a real API server (validation, RBAC, owner references,
garbage collection, scheduling, preemption), never against a mock. KWOK plays the kubelet:
its stages (``kwok_stages.yaml``) move scheduled pods to Running and, on request, end them
with a chosen exit code. Every port is picked free at start, so several control planes (a
test session and a benchmark, or pytest-xdist workers) can run side by side.

Start-up order (measured, see docs/control-plane.md): PKI; etcd *and* kube-apiserver together
(the apiserver retries etcd); controller manager, scheduler and KWOK as soon as the apiserver
answers HTTP (earlier, KWOK's exponential back-off - 1, 2, 4, 8, 16 s - can add seconds, and
the controller manager allows the apiserver only 10 s to become healthy); the fake nodes at
the same moment, while the apiserver runs its post-start hooks. Ready means: ``/readyz`` ok,
every node Ready without a not-ready/unreachable taint and with its Lease, ServiceAccount
default/default present (the controller manager runs), scheduler ``/readyz`` ok.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from trainjobs.testing import _flags
from trainjobs.testing._audit import AUDIT_LOG, audit_args, read_events, size_of
from trainjobs.testing._binaries import find_binaries
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubeapi import KubeAPI, health_ok, ok, serving
from trainjobs.testing._kubectl import run_kubectl, write_kubeconfig
from trainjobs.testing._nodes import create_node, node_leases, ready_nodes
from trainjobs.testing._pki import Pki, make_pki
from trainjobs.testing._process import ProcessRef, free_ports, start_daemon, stop_processes
from trainjobs.testing._state import (
    STATE_FILE,
    ControlPlaneState,
    read_state,
    stop_in_order,
    write_state,
)

if TYPE_CHECKING:
    from trainjobs.testing._kueue import Kueue, KueueOptions

KUBECONFIG_FILE = "kubeconfig"
#: Pod annotations read by the packaged KWOK stages (see kwok_stages.yaml).
EXIT_CODE_ANNOTATION = "kwok.trainjobs.io/exit-code"
RUN_DURATION_ANNOTATION = "kwok.trainjobs.io/run-duration"
FAIL_TIMES_ANNOTATION = "kwok.trainjobs.io/fail-times"
# klog E/F lines, Go flag errors, KWOK's and Kueue's (zap) JSON error records.
_ERROR_LINE = re.compile(r'^(?:[EF]\d{4} |Error: |error: )|"level":"(?:ERROR|error)"')
#: What kube-controller-manager logs when it gives up waiting for a healthy API server.
_KCM_GAVE_UP = "failed to wait for apiserver being healthy"
_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
_PORTS = ("etcd-client", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class ClusterOptions:
    """What to start: the fake nodes and any extra flags per component."""

    nodes: int = 2
    node_cpu: str = "32"
    node_memory: str = "256Gi"
    node_pods: str = "110"
    node_prefix: str = "kwok-node"
    node_labels: Mapping[str, str] = field(default_factory=dict)
    #: Node taints, e.g. ``{"key": "pool", "value": "small", "effect": "NoSchedule"}``.
    node_taints: tuple[Mapping[str, str], ...] = ()
    start_timeout: float = 120.0
    #: A KWOK stages file replacing the packaged ``kwok_stages.yaml``.
    stages: Path | None = None
    apiserver_args: tuple[str, ...] = ()
    controller_manager_args: tuple[str, ...] = ()
    scheduler_args: tuple[str, ...] = ()
    kwok_args: tuple[str, ...] = ()
    #: Gang schedulers to run beside kube-scheduler, with their CRDs: "coscheduling"
    #: (scheduler-plugins), "volcano" (see ``_gang.py``; built once like the control plane).
    gang_schedulers: tuple[str, ...] = ()
    #: An audit policy (e.g. ``AUDIT_WRITES``): the API server logs what it selects to
    #: ``logs/audit.log`` (read with :meth:`ControlPlane.audit_events`). None: no audit log.
    audit_policy: str | None = None
    #: Kueue (``_kueue.py``; built once like the control plane) started last, with its CRDs
    #: and webhooks: :attr:`ControlPlane.kueue`. None: no Kueue.
    kueue: KueueOptions | None = None

    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}-{i}" for i in range(self.nodes)]


def stages_file() -> Path:
    """The packaged KWOK stages (pod lifecycle with exit codes, node heartbeat)."""
    return Path(str(resources.files("trainjobs.testing").joinpath("kwok_stages.yaml")))


class ControlPlane:
    """A running control plane. Start with :meth:`start`; :meth:`stop` leaves no process.

    Attributes: ``workdir`` (everything lives here), ``kubeconfig`` (admin, system:masters),
    ``server`` (``https://127.0.0.1:PORT``), ``bin_dir``, ``logs_dir``, ``ports``,
    ``node_names`` and ``timings`` (seconds per start-up phase).
    """

    def __init__(
        self,
        *,
        workdir: Path,
        bin_dir: Path,
        pki: Pki,
        server: str,
        ports: Mapping[str, int],
        node_names: Sequence[str],
    ) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.pki = pki
        self.server = server
        self.ports = dict(ports)
        self.node_names = list(node_names)
        self.kubeconfig = workdir / KUBECONFIG_FILE
        self.logs_dir = workdir / "logs"
        self.timings: dict[str, float] = {}
        #: Components the harness restarted because they died after a restart it was asked
        #: for (see :meth:`restart`), with the reason from their log.
        self.healed: list[str] = []
        self._kcm_restarts = 0
        self._processes: list[ProcessRef] = []
        self._popens: dict[int, subprocess.Popen[bytes]] = {}
        self._commands: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._stopped: set[str] = set()
        self._audit_log: Path | None = None
        self._detach = False
        self.last_start: dict[str, float] = {}
        #: Kueue, when ``ClusterOptions.kueue`` asked for it (or started on it later).
        self.kueue: Kueue | None = None

    # -- start ------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        workdir: Path,
        options: ClusterOptions | None = None,
        *,
        bin_dir: Path | None = None,
        detach: bool = False,
    ) -> ControlPlane:
        """Start a control plane in ``workdir`` and wait until it is ready.

        ``detach=False`` (tests) ties every daemon to the calling thread: if this process
        dies, the kernel kills them. ``detach=True`` (the CLI's ``up``) lets them outlive it.
        On failure everything started is stopped and :class:`ControlPlaneError` names the
        component and its log.
        """
        options = options or ClusterOptions()
        t0 = time.monotonic()
        workdir = workdir.resolve()
        existing = read_state(workdir)
        if existing is not None and any(p.alive() for p in existing.processes):
            raise ControlPlaneError(
                f"a control plane is already running in {workdir}; stop it with "
                f"`python -m trainjobs.testing.cluster down --workdir {workdir}`"
            )
        bin_dir = bin_dir or find_binaries()
        for stale in ("etcd", "pki", "logs"):
            shutil.rmtree(workdir / stale, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        t_bin = time.monotonic()
        pki = make_pki(workdir / "pki")
        ports = dict(zip(_PORTS, free_ports(len(_PORTS)), strict=True))
        plane = cls(
            workdir=workdir,
            bin_dir=bin_dir,
            pki=pki,
            server=f"https://127.0.0.1:{ports['kube-apiserver']}",
            ports=ports,
            node_names=options.node_names(),
        )
        plane._detach = detach
        plane.timings["binaries"] = t_bin - t0
        plane.timings["pki"] = time.monotonic() - t_bin
        try:
            plane._boot(options, detach=detach, t0=t0)
        except BaseException:
            with contextlib.suppress(ControlPlaneError):  # the start-up error matters more
                plane.stop()
            raise
        return plane

    def _boot(self, options: ClusterOptions, *, detach: bool, t0: float) -> None:
        deadline = t0 + options.start_timeout
        write_kubeconfig(self.kubeconfig, self.server, self.pki)
        lay = _flags.Layout(self.workdir, self.kubeconfig, self.pki, self.ports)
        stages = self.workdir / "kwok-stages.yaml"
        shutil.copyfile(options.stages or stages_file(), stages)

        def launch(name: str, argv: list[str], extra_env: Mapping[str, str] | None = None) -> None:
            self.launch(name, self.bin_dir / name, argv, extra_env)

        api = self.api()
        audit: list[str] = []
        if options.audit_policy is not None:
            policy = self.workdir / "audit-policy.yaml"
            policy.write_text(options.audit_policy)
            self._audit_log = self.logs_dir / AUDIT_LOG
            audit = audit_args(policy, self._audit_log)
        launch("etcd", _flags.etcd_args(lay))
        launch("kube-apiserver",
               [*_flags.apiserver_args(lay), *audit, *options.apiserver_args])
        self._wait(lambda: serving(api), "kube-apiserver to serve", deadline)
        self.timings["apiserver_serving"] = time.monotonic() - t0
        launch(
            "kube-controller-manager",
            [*_flags.controller_manager_args(lay), *options.controller_manager_args],
        )
        launch("kube-scheduler", [*_flags.scheduler_args(lay), *options.scheduler_args])
        # kwok reads ~/.kwok/kwok.yaml when it exists: give it an empty home.
        (self.workdir / "kwok-home").mkdir(exist_ok=True)
        launch(
            "kwok",
            [*_flags.kwok_args(lay, stages), *options.kwok_args],
            {"HOME": str(self.workdir / "kwok-home")},
        )
        # The admin is in system:masters, allowed before the RBAC roles exist: create the
        # nodes while the apiserver finishes its post-start hooks.
        pending = list(self.node_names)

        def create_nodes() -> bool:
            pending[:] = [n for n in pending if not create_node(api, n, options)]
            return not pending

        heal = self._restart_impatient_controller_manager
        self._wait(create_nodes, "creating nodes", deadline, heal)
        self._wait(lambda: ok(api, "/readyz"), "kube-apiserver /readyz", deadline, heal)
        self.timings["apiserver_ready"] = time.monotonic() - t0
        self._wait(lambda: self._nodes_ready(api), f"{len(self.node_names)} nodes Ready",
                   deadline, heal)
        self.timings["nodes_ready"] = time.monotonic() - t0
        self._wait(lambda: self._leases_held(api), "a node Lease per node", deadline, heal)
        self._wait(
            lambda: ok(api, "/api/v1/namespaces/default/serviceaccounts/default"),
            "ServiceAccount default/default",
            deadline,
            heal,
        )
        self._wait(
            lambda: health_ok(self.ports["kube-scheduler"], "/readyz"),
            "kube-scheduler /readyz",
            deadline,
        )
        if options.gang_schedulers:
            from trainjobs.testing._gang import start_gang_schedulers

            start_gang_schedulers(self, options.gang_schedulers, deadline)
            self.timings["gang_schedulers"] = time.monotonic() - t0
        if options.kueue is not None:
            from trainjobs.testing._kueue import Kueue

            self.kueue = Kueue.start(
                self, replace(options.kueue,
                              start_timeout=max(1.0, deadline - time.monotonic())))
            self.timings["kueue"] = time.monotonic() - t0
        self.timings["total"] = time.monotonic() - t0
        self._write_state()

    def launch(
        self,
        name: str,
        binary: Path,
        argv: list[str],
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        """Start one more daemon of this control plane (logs/<name>.log), stopped with it;
        its command line is kept so that :meth:`restart` can start it again."""
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self._commands[name] = ([str(binary), *argv], {**env, **(extra_env or {})})
        self._launch(name)

    def wait_until(self, ready: Callable[[], bool], what: str, deadline: float) -> None:
        """Poll ``ready`` until ``deadline`` (monotonic); a daemon that exits fails at once."""
        self._wait(ready, what, deadline)

    def _launch(self, name: str) -> None:
        argv, env = self._commands[name]
        proc = start_daemon(argv, self.logs_dir / f"{name}.log", env=env, cwd=self.workdir,
                            die_with_parent=not self._detach)
        self._popens[proc.pid] = proc
        self._processes = [r for r in self._processes if r.name != name]
        self._processes.append(ProcessRef.of(name, proc.pid))
        self._stopped.discard(name)
        self._write_state()

    # -- files ------------------------------------------------------------------------------

    def _write_state(self) -> None:
        state = ControlPlaneState(
            workdir=str(self.workdir),
            bin_dir=str(self.bin_dir),
            kubeconfig=str(self.kubeconfig),
            server=self.server,
            logs_dir=str(self.logs_dir),
            ports=self.ports,
            nodes=self.node_names,
            timings=self.timings,
            processes=list(self._processes),
        )
        write_state(self.workdir, state)

    # -- waiting ----------------------------------------------------------------------------

    def _restart_impatient_controller_manager(self) -> None:
        """kube-controller-manager, launched as soon as the API server serves (its start then
        overlaps the API server's post-start hooks), waits about 10 s for the API server's
        /healthz and exits 1 when it is still unhealthy (the RBAC bootstrap hook on a loaded
        machine; seen in integration runs at load 25 on 2 CPUs). During the start only, such
        an exit is healed: it is started again, as a kubelet restarts a static pod, and the
        restart is recorded in :attr:`healed`. Any other exit still fails the start."""
        name = "kube-controller-manager"
        ref = next((r for r in self._processes if r.name == name), None)
        proc = self._popens.get(ref.pid) if ref is not None else None
        if proc is None or proc.poll() is None:
            return
        log = (self.logs_dir / f"{name}.log").read_text(errors="replace")
        gave_up = log.count(_KCM_GAVE_UP)
        if gave_up > self._kcm_restarts:  # (the log is appended to by every run)
            self._kcm_restarts = gave_up
            self.healed.append(f"at start: {name} exited (status {proc.returncode}) after "
                               f"{_KCM_GAVE_UP!r}; started again")
            self._launch(name)

    def _wait(self, ready: Callable[[], bool], what: str, deadline: float,
              heal: Callable[[], None] | None = None) -> None:
        while True:
            if heal is not None:
                heal()
            dead = self.dead()
            if dead:
                raise ControlPlaneError(f"while waiting for {what}: " + "\n".join(dead))
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out waiting for {what}; logs in {self.logs_dir}\n"
                    + "\n".join(f"--- {n}:\n{self.log_tail(n, 8)}"
                                for n in dict.fromkeys([*_COMPONENTS, *self._commands]))
                )
            time.sleep(0.05)

    def log_tail(self, component: str, lines: int = 20) -> str:
        """The error lines and the last ``lines`` lines of a component's log.

        Error lines come first because a Go program that rejects a flag prints its error and
        then a hundred lines of usage.
        """
        try:
            text = (self.logs_dir / f"{component}.log").read_text(errors="replace")
        except OSError:
            return ""
        all_lines = text.splitlines()
        errors = [line for line in all_lines if _ERROR_LINE.search(line)][-10:]
        tail = [line for line in all_lines[-lines:] if line not in errors]
        return "\n".join([*errors, *(["..."] if errors and tail else []), *tail])

    def add_nodes(self, options: ClusterOptions, timeout: float = 60.0) -> list[str]:
        """Add fake nodes to the running cluster as ``options`` describes them (names from
        ``node_prefix``, capacity, labels, taints) and wait until they are Ready; returns
        their names. E.g. small tainted nodes that one test steers its pods to (preemption
        needs a full node) without touching the nodes other tests share. KWOK manages every
        node; delete them with ``kubectl delete node``."""
        api = self.api()
        names = options.node_names()
        pending = list(names)
        deadline = time.monotonic() + timeout

        def create() -> bool:
            pending[:] = [n for n in pending if not create_node(api, n, options)]
            return not pending

        self._wait(create, f"creating nodes {names}", deadline)
        self._wait(lambda: self._nodes_ready(api, names), f"nodes {names} Ready", deadline)
        return names

    def _nodes_ready(self, api: KubeAPI, names: Sequence[str] | None = None) -> bool:
        ready = ready_nodes(api)
        return ready is not None and ready.issuperset(
            self.node_names if names is None else names)

    def _leases_held(self, api: KubeAPI) -> bool:
        held = node_leases(api)
        return held is not None and held.issuperset(self.node_names)

    # -- health and restarts ----------------------------------------------------------------

    def dead(self) -> list[str]:
        """One line per component that exited without being told to (name, exit status, log
        and its tail); empty when all run. A test that waits on pods while the scheduler is
        dead would otherwise only see them stay Pending."""
        out = []
        for ref in self._processes:
            if ref.name in self._stopped:
                continue
            proc = self._popens.get(ref.pid)
            if proc is not None:
                code = proc.poll()
                if code is None:
                    continue
            elif ref.alive():
                continue
            else:
                code = None
            out.append(
                f"{ref.name} exited (status {code}); log {self.logs_dir / (ref.name + '.log')}:"
                f"\n{self.log_tail(ref.name)}"
            )
        return out

    def check_alive(self) -> None:
        """Raise :class:`ControlPlaneError` naming every component that died, with its log."""
        dead = self.dead()
        if dead:
            raise ControlPlaneError("control plane component died: " + "\n".join(dead))

    def kill(self, component: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to one component and wait until it is gone; it
        stays down (and is not reported by :meth:`dead`) until :meth:`start_component`."""
        refs = [r for r in self._processes if r.name == component]
        if not refs:
            raise ControlPlaneError(f"no component {component!r} (have {sorted(self.pids)})")
        self._stopped.add(component)
        if sig != signal.SIGTERM:
            for ref in refs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(ref.pid, sig)
        left = stop_processes(refs, popens=self._popens)
        if left:
            raise ControlPlaneError(f"{component} still running after SIGKILL")

    def start_component(self, component: str, timeout: float = 60.0) -> None:
        """Start a stopped component again with its first command line, and wait until it
        serves (the API server: /readyz; etcd: the API server's etcd check; the scheduler:
        its /readyz)."""
        if component not in self._commands:
            raise ControlPlaneError(f"no component {component!r}")
        self._launch(component)
        self.wait_serving(component, timeout)

    def wait_serving(self, component: str, timeout: float = 60.0) -> None:
        """Wait until ``component`` serves again; :attr:`last_start` records when (wall clock:
        ``started``, ``serving`` - the API server answers at all - and ``ready``)."""
        deadline = time.monotonic() + timeout
        api = self.api()
        self.last_start = {"started": time.time()}
        if component in ("kube-apiserver", "etcd"):
            if component == "kube-apiserver":
                self._wait(lambda: serving(api), "kube-apiserver to serve", deadline)
                self.last_start["serving"] = time.time()
            self._wait(lambda: ok(api, "/readyz"), f"kube-apiserver /readyz after {component}",
                       deadline)
        elif component in ("kube-scheduler", "kube-controller-manager"):
            path = "/readyz" if component == "kube-scheduler" else "/healthz"
            self._wait(lambda: health_ok(self.ports[component], path),
                       f"{component} {path}", deadline)
        elif component == "kueue" and self.kueue is not None:
            self.kueue.wait_ready(deadline)
        self.last_start["ready"] = time.time()

    def restart(self, component: str, *, down: float = 0.0, sig: int = signal.SIGKILL,
                timeout: float = 60.0) -> list[str]:
        """Kill one component, keep it down ``down`` seconds, start it again and wait until it
        serves. A supported operation for etcd and the API server too (the chaos suite's
        outages): after those, every other component gets ``timeout`` seconds to be healthy
        again, and one that exited meanwhile is started again (kube-scheduler v1.36 exits with
        "Scheduler cache is corrupted" on some API server restarts) and recorded in
        :attr:`healed`; KWOK is restarted in any case (:meth:`_resync_kwok`). Returns the
        names of the components so healed."""
        self.kill(component, sig)
        if down > 0:
            time.sleep(down)
        return self.recover(component, timeout)

    def recover(self, component: str, timeout: float = 60.0) -> list[str]:
        """Start ``component``, stopped by :meth:`kill`, again and heal the rest as
        :meth:`restart` does (for an outage whose end a test decides while it watches, e.g. a
        MultiKueue worker's API server lost mid-run). Returns the names of the healed."""
        self.start_component(component, timeout)
        healed: list[str] = []
        if component in ("kube-apiserver", "etcd"):
            time.sleep(1.0)  # the clients' watches fail and re-list now
            for name in ("kube-scheduler", "kube-controller-manager", "kwok"):
                line = next((d for d in self.dead() if d.startswith(f"{name} ")), None)
                if name in self._commands and line is not None:
                    self.healed.append(f"after a {component} restart: {line}")
                    healed.append(name)
                    self.start_component(name, timeout)
            if "kwok" in self._commands and "kwok" not in healed:
                self._resync_kwok(timeout)
        return healed

    def _resync_kwok(self, timeout: float) -> None:
        """Restart KWOK so it plays every pod's stage again, as a kubelet's status sync would.

        Why: a kubelet retries a failed status update on its next sync; KWOK v0.8.0 retries a
        stage's patch only after connection refused, a timeout, 503 or 429 (`shouldRetry`)
        and drops it on anything else - such as the 500 ("rpc error: code = Unavailable") of
        an API server whose etcd has just gone. The pod then stays where it was (seen: a
        Worker bound to its node, Pending for good, its job lost to the chaos suite's etcd
        outage) and nothing replays the stage, since nothing changes the pod again. A fresh
        KWOK lists every pod and plays what is due; `last_start` keeps the outage's times."""
        times = self.last_start
        api = self.api()
        deadline = time.monotonic() + timeout
        # After an etcd restart the API server answers /readyz while its watch cache still
        # refuses lists (429 "storage is (re)initializing"): a KWOK started then backs off.
        for path in ("/api/v1/nodes?limit=1", "/api/v1/pods?limit=1"):
            self._wait(functools.partial(ok, api, path), f"{path} after the restart", deadline)
        self.kill("kwok")
        # A KWOK manages a node only once it holds the node's Lease: the dead one's would
        # keep the new one waiting for --node-lease-duration-seconds (40 s).
        self.kubectl("delete", "leases", "-n", "kube-node-lease", "--all", "--wait=false")
        self.start_component("kwok", timeout)
        self.last_start = times

    # -- audit log --------------------------------------------------------------------------

    @property
    def audit_log(self) -> Path | None:
        """The API server's audit log (``ClusterOptions.audit_policy``), or None."""
        return self._audit_log

    def audit_offset(self) -> int:
        """Where the audit log ends now: pass it to :meth:`audit_events` later."""
        return 0 if self._audit_log is None else size_of(self._audit_log)

    def audit_events(self, since: int = 0) -> list[dict[str, Any]]:
        """The audit events logged after byte ``since`` (empty without an audit policy)."""
        return [] if self._audit_log is None else read_events(self._audit_log, since)

    # -- use --------------------------------------------------------------------------------

    def api(self) -> KubeAPI:
        """A small synchronous REST client with the admin certificate."""
        return KubeAPI(
            self.server,
            ca_cert=self.pki.ca_cert,
            client_cert=self.pki.admin_cert,
            client_key=self.pki.admin_key,
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the matching kubectl against this control plane; raise
        :class:`~trainjobs.testing.KubectlError` on a non-zero exit unless ``check`` is false."""
        return run_kubectl(
            self.bin_dir / "kubectl",
            self.kubeconfig,
            *args,
            input=input,
            check=check,
            timeout=timeout,
        )

    def stop(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL) and forget them. Idempotent."""
        self._stopped.update(self._commands)
        left = stop_in_order(self._processes, self._popens)
        self._popens.clear()
        self._processes.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / STATE_FILE).unlink()
        if left:
            raise ControlPlaneError(f"still running after SIGKILL: {', '.join(left)}")

    @property
    def pids(self) -> dict[str, int]:
        return {ref.name: ref.pid for ref in self._processes}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
