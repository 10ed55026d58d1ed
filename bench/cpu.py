"""CPU accounting: seconds used by each control-plane daemon, the operator, the bench itself
and the whole machine between two moments.

Why the whole machine too: on a shared 2-CPU machine a figure means little without what else
ran (`others` in `cpu_diff`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from trainjobs.testing import ControlPlane
from trainjobs.testing._process import proc_stat

if TYPE_CHECKING:
    from bench.operator import OperatorProcess

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields[:8]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _CLK_TCK, sum(ticks) / _CLK_TCK


def cpu_snapshot(plane: ControlPlane, operator: OperatorProcess | None = None
                 ) -> dict[str, float]:
    """CPU seconds used so far by each control-plane daemon, the operator, this bench process
    and the whole machine (`machine_busy`)."""
    out = {}
    for name, pid in plane.pids.items():
        st = proc_stat(pid)
        out[name] = st.cpu_s if st else 0.0
    if operator is not None and operator.proc is not None:
        out["operator"] = operator.footprint()["cpu_s"]
    t = os.times()
    out["bench"] = t.user + t.system
    out["machine_busy"], out["machine_total"] = machine_cpu()
    return out


def cpu_diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """CPU seconds per component between two snapshots; `others` is the machine's busy time
    not accounted to any of them (other users of the machine)."""
    out = {k: round(after[k] - before.get(k, 0.0), 2) for k in after
           if k not in ("machine_busy", "machine_total")}
    busy = after["machine_busy"] - before["machine_busy"]
    out["others"] = round(busy - sum(out.values()), 2)
    out["machine_busy"] = round(busy, 2)
    out["machine_capacity"] = round(after["machine_total"] - before["machine_total"], 2)
    return out


#: The keys of a `cpu_diff` that are not a control-plane daemon.
NOT_CONTROL_PLANE = frozenset({"operator", "bench", "others", "machine_busy", "machine_capacity"})


def control_plane_cpu(diff: dict[str, float]) -> float:
    """The CPU seconds of a `cpu_diff` that the control plane's daemons spent."""
    return sum(v for k, v in diff.items() if k not in NOT_CONTROL_PLANE)
