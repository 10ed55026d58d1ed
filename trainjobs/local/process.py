"""One replica as a local process: started from its pod's framework container, watched, stopped.

Why a process group per replica: frameworks fork (MXNet's ps-lite threads, TensorFlow's gRPC
servers, torch's workers); stopping a replica must stop everything it started, and Ctrl-C on
`trainjobs run` must leave no orphan. Each replica runs in its own session, and is stopped with
SIGTERM to the group, then SIGKILL after a grace period; SIGCONT follows the SIGTERM, so that a
replica stopped by `--inject hang` (SIGSTOP) acts on it too.

The pod's restart policy is honoured in place like the kubelet does: with OnFailure (or
Always) a process that exits non-zero (or at all) is started again after a back-off, its
restart count grows and the replica stays Running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainjobs.core.observed import ObservedPod, PodPhase, attempt_of
from trainjobs.core.render import LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from trainjobs.errors import SpecError

__all__ = ["ProcessSpec", "ReplicaProcess", "process_spec"]

STOP_GRACE_SECONDS = 5.0
BACKOFF_START, BACKOFF_MAX = 0.5, 10.0
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


@dataclass(frozen=True)
class ProcessSpec:
    """What to execute for one pod."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    restart_policy: str  # the pod's: Never | OnFailure | Always


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known variables are replaced, $$(VAR) escapes."""
    return _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), value.replace("$$(", "\0("))\
        .replace("\0(", "$(")


def process_spec(pod: dict[str, Any], container_name: str, base_dir: Path,
                 path: str) -> ProcessSpec | SpecError:
    """The process for a pod's framework container, or why it cannot run locally."""
    containers = pod["spec"]["containers"]
    container = next((c for c in containers if c.get("name") == container_name),
                     containers[0] if containers else None)
    if container is None:
        return SpecError(f"{path}.spec.containers", "no container to run")
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not container.get("command"):
        return SpecError(f"{path}.spec.containers[{containers.index(container)}].command",
                         "required locally: the local runtime cannot run an image's entrypoint")
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = _expand(str(var["value"]), env)
        elif "valueFrom" in var and "fieldRef" in var["valueFrom"]:
            field_path = var["valueFrom"]["fieldRef"].get("fieldPath", "")
            env[var["name"]] = _field_ref(pod, field_path)
    argv = [_expand(a, env) for a in command]
    workdir = container.get("workingDir")
    cwd = base_dir / workdir if workdir and not Path(workdir).is_absolute() else \
        Path(workdir) if workdir else base_dir
    exe = shutil.which(argv[0], path=os.environ.get("PATH")) if "/" not in argv[0] else argv[0]
    if exe is None:
        return SpecError(f"{path}.spec.containers[{containers.index(container)}].command",
                         f"{argv[0]!r} is not on PATH")
    return ProcessSpec(argv, env, cwd, pod["spec"].get("restartPolicy", "Never"))


def _field_ref(pod: dict[str, Any], field_path: str) -> str:
    meta = pod["metadata"]
    simple = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
              "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1",
              "spec.nodeName": "localhost"}
    if field_path in simple:
        return str(simple[field_path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field_path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    return ""


class ReplicaProcess:
    """A running (or finished) replica. Its state is read as an `ObservedPod`."""

    def __init__(
        self,
        name: str,
        pod: dict[str, Any],
        spec: ProcessSpec,
        log_path: Path,
        on_line: Callable[[str, str], None],
        on_change: Callable[[], None],
    ) -> None:
        self.name = name
        self.uid = f"{name}-{os.urandom(4).hex()}"
        labels = pod["metadata"]["labels"]
        self.replica_type_lower = labels.get(LABEL_REPLICA_TYPE, name)
        self.index = int(labels.get(LABEL_REPLICA_INDEX, 0))
        self.attempt = attempt_of(pod["metadata"])
        self.spec = spec
        self.log_path = log_path
        self._on_line = on_line
        self._on_change = on_change
        self.phase = PodPhase.PENDING
        self.exit_code: int | None = None
        self.restarts = 0
        self.deleting = False
        self.created = datetime.now(UTC)
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._supervise(),
                                                             name=f"replica {self.name}")

    async def _spawn(self) -> asyncio.subprocess.Process:
        env = {**os.environ, **self.spec.env}
        return await asyncio.create_subprocess_exec(
            *self.spec.argv, cwd=self.spec.cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)

    async def _supervise(self) -> None:
        backoff = BACKOFF_START
        with self.log_path.open("ab") as log:
            while True:
                try:
                    self._proc = await self._spawn()
                except OSError as exc:
                    self._on_line(self.name, f"cannot start {self.spec.argv[0]}: {exc}")
                    self.exit_code, self.phase = 127, PodPhase.FAILED
                    break
                self.phase = PodPhase.RUNNING
                self._on_change()
                assert self._proc.stdout is not None
                async for raw in self._proc.stdout:
                    log.write(raw)
                    log.flush()
                    self._on_line(self.name, raw.decode(errors="replace").rstrip("\n"))
                code = await self._proc.wait()
                self.exit_code = code if code >= 0 else 128 - code  # killed by signal N
                if self.deleting or not self._restart_in_place(self.exit_code):
                    self.phase = PodPhase.SUCCEEDED if self.exit_code == 0 else PodPhase.FAILED
                    break
                self.restarts += 1
                self._on_line(self.name, f"exited with code {self.exit_code}; restarting in "
                                         f"place (restart {self.restarts}) in {backoff:.1f}s")
                self._on_change()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                if self.deleting:
                    break
        self._on_change()

    def _restart_in_place(self, code: int) -> bool:
        policy = self.spec.restart_policy
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM to the process group, SIGKILL after `grace` seconds."""
        self.deleting = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            _signal_group(proc.pid, signal.SIGCONT)  # a stopped (hung) group acts on it
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
            except TimeoutError:
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        # Whatever the leader left behind in its group goes too.
        if proc is not None:
            _signal_group(proc.pid, signal.SIGKILL)
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def pid(self) -> int | None:
        """The running process's id (its group's too); None before it starts, between
        restarts in place, and once it has exited."""
        proc = self._proc
        if proc is None or proc.returncode is not None or self.phase is not PodPhase.RUNNING:
            return None
        return proc.pid

    def signal_group(self, sig: signal.Signals) -> None:
        """Send `sig` to the running process's group (`--inject`); nothing if none runs."""
        pid = self.pid
        if pid is not None:
            _signal_group(pid, sig)

    @property
    def finished(self) -> bool:
        return self._task is not None and self._task.done()

    def observed(self) -> ObservedPod:
        return ObservedPod(
            name=self.name, uid=self.uid, replica_type_lower=self.replica_type_lower,
            index=self.index, phase=self.phase, exit_code=self.exit_code,
            reason="" if self.exit_code in (None, 0) else "Error", restarts=self.restarts,
            deleting=self.deleting and not self.finished, created=self.created,
            last_exit_code=self.exit_code if self.restarts else None,
            last_reason="Error" if self.restarts and self.exit_code else "",
            attempt=self.attempt)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
