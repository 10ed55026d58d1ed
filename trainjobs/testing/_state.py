"""The state file ``up`` leaves in its workdir, and stopping what it names.

``WORKDIR/control-plane.json`` records the server, ports, nodes, start-up timings and each
daemon (pid and kernel start time). It is written as soon as the first daemon starts, so
``down`` can clean up after an ``up`` that crashed half-way, and removed once all are gone.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._process import ProcessRef, stop_processes

STATE_FILE = "control-plane.json"
# Stop order, one group at a time: the apiserver's clients, the apiserver, etcd. Signalled all
# at once, etcd waits ~7 s for the apiserver's watch streams and the apiserver hangs on etcd;
# in this order the whole shutdown takes ~1.2 s (the apiserver's own graceful stop).
_STOP_GROUPS = (
    ("kwok", "kube-scheduler", "kube-controller-manager",
     # the gang schedulers (_gang.py): clients of the apiserver like the others
     "scheduler-plugins-scheduler", "scheduler-plugins-controller", "vc-scheduler",
     # Kueue (_kueue.py)
     "kueue"),
    ("kube-apiserver",),
    ("etcd",),
)


@dataclass(frozen=True)
class ControlPlaneState:
    """What ``up`` records for ``down`` and for humans."""

    workdir: str
    bin_dir: str
    kubeconfig: str
    server: str
    logs_dir: str
    ports: Mapping[str, int]
    nodes: Sequence[str]
    timings: Mapping[str, float]
    processes: Sequence[ProcessRef]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["processes"] = [asdict(p) for p in self.processes]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControlPlaneState:
        fields = dict(data)
        fields["processes"] = [ProcessRef(**p) for p in data.get("processes", [])]
        return cls(**fields)


def write_state(workdir: Path, state: ControlPlaneState) -> None:
    tmp = workdir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    tmp.replace(workdir / STATE_FILE)


def read_state(workdir: Path) -> ControlPlaneState | None:
    """The state file of ``workdir``, or None when nothing runs there."""
    try:
        data = json.loads((workdir / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise ControlPlaneError(f"unreadable state file in {workdir}: {exc}") from exc
    return ControlPlaneState.from_json(data)


def stop_in_order(
    refs: Sequence[ProcessRef], popens: Mapping[int, subprocess.Popen[bytes]]
) -> list[str]:
    """Stop ``refs`` group by group (see ``_STOP_GROUPS``); return those still running."""
    groups = [[r for r in refs if r.name in group] for group in _STOP_GROUPS]
    groups.append([r for r in refs if not any(r.name in g for g in _STOP_GROUPS)])
    left: list[str] = []
    for group in groups:
        left += stop_processes(group, popens=popens)
    return left


def stop_control_plane(workdir: Path) -> list[str]:
    """Stop what ``up`` started in ``workdir``; return the names of the daemons that were
    running. Nothing started there, or already stopped: returns ``[]``."""
    workdir = workdir.resolve()
    state = read_state(workdir)
    if state is None:
        return []
    running = [r.name for r in state.processes if r.alive()]
    left = stop_in_order(state.processes, {})
    if left:
        raise ControlPlaneError(f"still running after SIGKILL: {', '.join(left)}")
    (workdir / STATE_FILE).unlink(missing_ok=True)
    return running
