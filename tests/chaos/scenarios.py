"""The chaos scenarios, each a function of its size: the tests run a small size in
``make test`` and the full size with ``--chaos``. Each returns its :class:`Figures`; the tests
assert ``figures.problems() == []`` and scenario-specific bounds."""

from __future__ import annotations

import json
import random
import re
import time
from typing import Any

from tests.chaos.harness import (
    ChaosEnv,
    Figures,
    StatusWatch,
    audit_figures,
    create_all,
    find_orphans,
    operator_writes_after,
    timed,
    wait_finished,
)
from tests.integration.operator_helpers import Operator, job, replica, true_conditions

KINDS = ("MxJob", "TfJob")
#: Operator log records that are never acceptable (a crash, an assert, a traceback).
TRACEBACK = re.compile(r"Traceback|AssertionError")


def storm_job(name: str, *, workers: int = 2, run: str = "4s") -> dict[str, Any]:
    """An MxJob whose Workers end with 0 after ``run``; scheduler and server run until the
    operator deletes them (cleanPodPolicy Running)."""
    return job("MxJob", name, {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", workers, exit_code=0, run=run),
    })


def failing_job(name: str, backoff: int) -> dict[str, Any]:
    """An MxJob whose one Worker fails with 137 (retryable under ExitCode) after 1 s every
    time: recreated ``backoff`` times, then the job Fails."""
    return job("MxJob", name, {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 1, exit_code=137, run="1s", restart_policy="ExitCode"),
    }, runPolicy={"backoffLimit": backoff})


def _tracebacks(operators: list[Operator]) -> list[str]:
    return [f"{op.name}: {r.get('msg')} {r.get('exception', '')}"[:400]
            for op in operators for r in op.records()
            if TRACEBACK.search(f"{r.get('msg', '')} {r.get('exception', '')}")]


def _finish(env: ChaosEnv, figures: Figures, watch: StatusWatch, names: list[str],
            budget: float, audit0: int) -> float:
    """Wait for the jobs, then fill in the figures; returns when (wall clock) all ended."""
    figures.jobs = len(names)
    figures.lost = wait_finished(watch, names, budget, env.operators.started[-1:])
    figures.finished = len(names) - len(figures.lost)
    finished_at = time.time()
    figures.orphans = find_orphans(env.ns, ("MxJob", "TfJob", "Caffe2Job"))
    audit_figures(figures, env.plane, env.ns.name, audit0)
    figures.statuses_seen = watch.seen
    figures.double_true = list(watch.double_true)
    figures.finished_flips = list(watch.finished_flips)
    bad = _tracebacks(env.operators.started)
    if bad:
        figures.notes.append(f"tracebacks in the operator log: {bad[:3]}")
        figures.extra["tracebacks"] = len(bad)
    return finished_at


def sigkill_storm(env: ChaosEnv, *, jobs: int, kills: int, budget: float,
                  failing_every: int = 0, backoff: int = 2, seed: int = 15) -> Figures:
    """``jobs`` jobs created at once while the operator is SIGKILLed ``kills`` times (1-3 s
    apart, restarted at once); every ``failing_every``-th job's Worker fails and is
    recreated ``backoff`` times. Recovery: kill to the new operator's /readyz."""
    rng = random.Random(seed)
    figures = Figures(f"SIGKILL storm ({jobs} jobs, {kills} kills)")
    audit0 = env.plane.audit_offset()
    with timed(figures), StatusWatch(env.plane, env.ns.name, ("MxJob",)) as watch:
        op = env.operators.start("--log-level", "info")
        manifests = [failing_job(f"s{i}", backoff) if failing_every and i % failing_every == 0
                     else storm_job(f"s{i}") for i in range(jobs)]
        names = create_all(env.ns, manifests)
        ready: list[float] = []
        for _ in range(kills):
            time.sleep(rng.uniform(1.0, 3.0))
            op.kill()
            t0 = time.monotonic()
            op = env.operators.start("--log-level", "info", timeout=120)
            ready.append(time.monotonic() - t0)
        figures.faults = kills
        if ready:
            figures.recovery_s["kill to ready, median"] = sorted(ready)[len(ready) // 2]
            figures.recovery_s["kill to ready, max"] = max(ready)
        t_last = time.monotonic()
        _finish(env, figures, watch, names, budget, audit0)
        figures.recovery_s["last kill to all finished"] = time.monotonic() - t_last
    return figures


def component_outage(env: ChaosEnv, component: str, *, jobs: int, down: float,
                     budget: float) -> Figures:
    """``jobs`` jobs running when ``component`` (kube-apiserver or etcd) is SIGKILLed, kept
    down ``down`` seconds and started again, their Workers ending during the outage.
    Recovery: the API server answering again (etcd: ready again) to the operator's first
    write after it (audit log), and to every job finished."""
    figures = Figures(f"{component} killed mid-run, down {down:g} s ({jobs} jobs)")
    audit0 = env.plane.audit_offset()
    with timed(figures), StatusWatch(env.plane, env.ns.name, ("MxJob",)) as watch:
        env.operators.start("--log-level", "info")
        names = create_all(env.ns, [storm_job(f"o{i}", run=f"{down + 4:g}s")
                                    for i in range(jobs)])
        time.sleep(3.0)  # pods scheduled and Running; their Workers end during the outage
        killed = time.time()
        healed = env.plane.restart(component, down=down, timeout=120)
        times = env.plane.last_start
        back = times.get("serving", times["ready"])
        figures.extra["outage_s"] = round(back - killed, 2)
        figures.extra["back_to_ready_s"] = round(times["ready"] - back, 2)
        figures.faults = 1
        if healed:
            figures.notes.append(f"the harness restarted {healed} after the {component} "
                                 f"restart: {env.plane.healed[-len(healed):]}"[:600])
        figures.extra["healed"] = healed
        finished_at = _finish(env, figures, watch, names, budget, audit0)
        figures.recovery_s[f"{component} back to all finished"] = finished_at - back
        first = operator_writes_after(env.plane, audit0, back, env.ns.name)
        if first is not None:
            figures.recovery_s[f"{component} back to first operator write"] = first - back
        else:
            figures.notes.append(f"no operator write logged after {component} was back")
        figures.extra["watch_reconnects"] = watch.reconnects
    return figures


def leader_kill(env: ChaosEnv, *, jobs: int, budget: float) -> Figures:
    """Two operators with leader election; the leader is SIGKILLed halfway through a burst of
    ``jobs`` creates. Recovery: kill to the standby's "became leader" (lease 4 s)."""
    figures = Figures(f"leader SIGKILL during a burst ({jobs} jobs, lease 4 s)")
    audit0 = env.plane.audit_offset()
    args = ("--leader-elect", "--leader-election-namespace", env.ns.name,
            "--leader-election-id", "chaos-leader", "--lease-duration", "4",
            "--renew-deadline", "3", "--retry-period", "1", "--log-level", "info")
    with timed(figures), StatusWatch(env.plane, env.ns.name, ("MxJob",)) as watch:
        a = env.operators.start(*args, name="a")
        a.wait_logged("became leader")
        b = env.operators.start(*args, name="b")
        half = jobs // 2
        names = create_all(env.ns, [storm_job(f"l{i}") for i in range(half)])
        a.kill()
        killed = time.monotonic()
        names += create_all(env.ns, [storm_job(f"l{i}") for i in range(half, jobs)])
        b.wait_logged("became leader", timeout=60)
        figures.recovery_s["leader kill to standby leading"] = time.monotonic() - killed
        figures.faults = 1
        _finish(env, figures, watch, names, budget, audit0)
    return figures


def ownership_conflicts(env: ChaosEnv, *, rounds: int, budget: float) -> Figures:
    """Per round: an MxJob and a TfJob of one name (their Services and Worker pods share
    names); a labelled pod squatting a job's pod name, owned by no job; a stray labelled pod
    created and deleted; a job deleted and created again at once under the same name. The
    first job of a clash and the recreated job must succeed; the second of a clash and the
    squatted job must fail with NameConflict; the squatter must stay untouched."""
    figures = Figures(f"ownership conflicts ({rounds} rounds)")
    audit0 = env.plane.audit_offset()
    ns = env.ns
    expect: dict[str, str] = {}
    with timed(figures), StatusWatch(env.plane, ns.name, ("MxJob", "TfJob")) as watch:
        env.operators.start("--log-level", "info")
        for r in range(rounds):
            clash, squat, again = f"clash{r}", f"squat{r}", f"again{r}"
            create_all(ns, [storm_job(clash, run="6s")])
            time.sleep(0.5)
            tf = job("TfJob", clash, {"Chief": replica("TfJob", exit_code=0, run="2s"),
                                      "Worker": replica("TfJob", 2, exit_code=0, run="2s")})
            create_all(ns, [tf])
            squatter = {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"{squat}-worker-0",
                                     "labels": {"trainjobs.io/job-name": squat}},
                        "spec": {"containers": [{"name": "x", "image": "example.invalid/x"}]}}
            ns.kubectl("apply", "-f", "-", input=json.dumps(squatter))
            stray = {**squatter, "metadata": {"name": f"stray{r}",
                                              "labels": {"trainjobs.io/job-name": "nobody"}}}
            ns.kubectl("apply", "-f", "-", input=json.dumps(stray))
            create_all(ns, [storm_job(squat, run="2s"), storm_job(again, run="30s")])
            ns.kubectl("delete", "pod", f"stray{r}", "--wait=false")
            time.sleep(1.0)
            ns.kubectl("delete", "mxjob", again, "--wait=false")
            create_all(ns, [storm_job(again, run="2s")])
            expect.update({f"MxJob/{clash}": "Succeeded", f"TfJob/{clash}": "Failed",
                           f"MxJob/{squat}": "Failed", f"MxJob/{again}": "Succeeded"})
        lost = wait_finished(watch, sorted(expect), budget, env.operators.started[-1:])
        with watch._lock:
            latest = {f"{kind}/{name}": obj for (kind, name), obj in watch.latest.items()}
        wrong = []
        for key, want in expect.items():
            status = (latest.get(key) or {}).get("status") or {}
            ended = set(true_conditions(status)) & {"Succeeded", "Failed"}
            if ended != {want}:
                wrong.append(f"{key}: {sorted(ended)} (expected {want})")
                continue
            if want == "Failed":
                failed = next(c for c in status["conditions"] if c["type"] == "Failed")
                if failed.get("reason") != "NameConflict":
                    wrong.append(f"{key}: Failed with {failed.get('reason')}: "
                                 f"{failed.get('message')}")
        for r in range(rounds):
            pod = ns.pod(f"squat{r}-worker-0")
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                wrong.append(f"the squatter squat{r}-worker-0 was deleted")
            else:
                ns.kubectl("delete", "pod", f"squat{r}-worker-0", "--wait=false")
        figures.jobs = len(expect)
        figures.lost = lost + wrong
        figures.finished = len(expect) - len(figures.lost)
        figures.orphans = find_orphans(ns, ("MxJob", "TfJob"))
        audit_figures(figures, env.plane, ns.name, audit0)
        figures.statuses_seen = watch.seen
        figures.double_true = list(watch.double_true)
        figures.finished_flips = list(watch.finished_flips)
        bad = _tracebacks(env.operators.started)
        errors = env.operators.started[-1].problems()
        if bad or errors:
            figures.lost.append(f"operator log: {(bad + errors)[:3]}")
    return figures
