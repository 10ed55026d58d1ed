"""The operator logs, at info level, one line per state a job enters — created, running,
restarting, succeeded, failed with its reason — so that `kubectl logs deployment/...` (as
the Helm chart's NOTES suggest) shows what happened to the jobs. Read from a real operator's
JSON log on the real control plane."""

from __future__ import annotations

from itertools import pairwise

import pytest

from tests.integration.operator_helpers import Namespace, Operators, job, replica, wait_for

pytestmark = pytest.mark.integration


def test_one_info_line_per_state_change(bare_ns: Namespace, operators: Operators) -> None:
    op = operators.start()
    key = f"{bare_ns.name}/"
    bare_ns.apply(job("MxJob", "ok", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", 1, exit_code=0, run="2s")}))
    bare_ns.apply(job("TfJob", "flaky", {
        "Worker": replica("TfJob", 1, exit_code=137, run="1s", restart_policy="ExitCode")},
        runPolicy={"backoffLimit": 1}))
    bare_ns.wait_condition("MxJob", "ok", "Succeeded", timeout=60)
    bare_ns.wait_condition("TfJob", "flaky", "Failed", timeout=60)

    def lines(name: str) -> list[str]:
        return [str(r["msg"]) for r in op.logged(rf"^\w+ {key}{name}: ")
                if r.get("level") == "info"]

    ok = wait_for(lambda: lines("ok") if any("Succeeded" in m for m in lines("ok")) else None,
                  "the operator to log ok's success")
    states = [m.split(": ", 2)[1].split(" (was")[0] for m in ok]
    assert states == ["Created", "Running", "Succeeded"], ok
    assert ok[0].startswith(f"MxJob {key}ok: Created (was new): JobCreated: MxJob ok is "
                            "created"), ok
    assert ok[2].startswith(f"MxJob {key}ok: Succeeded (was Running): JobSucceeded"), ok

    flaky = wait_for(lambda: lines("flaky") if any("Failed" in m for m in lines("flaky"))
                     else None, "the operator to log flaky's failure")
    states = [m.split(": ", 2)[1].split(" (was")[0] for m in flaky]
    assert states[0] == "Created" and states[-1] == "Failed", flaky
    assert "Restarting" in states, flaky
    failed = flaky[-1]
    assert "BackoffLimitExceeded" in failed and "exceed backoffLimit 1" in failed, failed
    # One line per change: no state logged twice in a row.
    assert all(a != b for a, b in pairwise(states)), flaky
