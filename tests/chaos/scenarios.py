"""The chaos scenarios, each a function of its size: the tests run a small size in
``make test`` and the full size with ``--chaos``. Each returns its :class:`Figures`; the tests
assert ``figures.problems() == []`` and scenario-specific bounds."""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.chaos.failattempts import FailAttempts
from tests.chaos.harness import (
    ChaosEnv,
    Figures,
    StatusWatch,
    audit_figures,
    create_all,
    epoch_of,
    find_orphans,
    operator_writes_after,
    timed,
    wait_finished,
)
from tests.chaos.podwatch import PodWatch
from tests.chaos.ruled import SHAPES, allowed_creates, check_ruled, ruled_job
from tests.integration.operator_helpers import Operator, job, replica, true_conditions
from trainjobs.testing import pod_histories

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


def caffe2_job(name: str, shards: int, *, run: str = "4s") -> dict[str, Any]:
    """A Caffe2Job of ``shards`` shards ending with 0 after ``run`` (a shared-directory
    rendezvous: no Redis to run; the restart-together path is the same for every backend).
    A failure (exit 137, OnFailure) restarts every shard together as a new attempt.

    terminationGracePeriodSeconds 0: the operator's deletes of a failed shard's running peers
    are then immediate. With a grace period they go through KWOK's pod-delete stage, which
    KWOK v0.8.0 plays by name: under load it deleted the peer's successor, the next attempt's
    freshly created (Pending) shard, 24 times in one storm (docs/control-plane.md, "Pods on
    fake nodes"; docs/reliability.md) - a harness defect, not the operator's."""
    workers = replica("Caffe2Job", shards, exit_code=0, run=run, restart_policy="OnFailure")
    workers["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    return job("Caffe2Job", name, {"Worker": workers},
               backend={"type": "nfs", "nfsPath": "/shared"}, runPolicy={"backoffLimit": 3})


def tf_job(name: str, *, run: str = "4s") -> dict[str, Any]:
    """A TfJob whose Chief and 2 Workers end with 0 after ``run``."""
    return job("TfJob", name, {
        "Chief": replica("TfJob", exit_code=0, run=run),
        "Worker": replica("TfJob", 2, exit_code=0, run=run),
    })


@dataclass(frozen=True)
class StormMix:
    """What a SIGKILL storm creates: ``mx`` MxJobs (every ``failing_every``-th one's Worker
    fails every time, recreated ``backoff`` times), ``caffe2`` Caffe2Jobs of 2-8 shards (every
    ``caffe2_failing_every``-th one has a shard that fails in consecutive attempts, 1 to
    ``caffe2_failures`` of them in turn: all restart together each time, and the job still
    succeeds within its backoffLimit 3), ``tf`` TfJobs and ``ruled`` MxJobs with failure
    rules (tests/chaos/ruled.py: every other one of each shape), interleaved."""

    mx: int
    caffe2: int = 0
    tf: int = 0
    failing_every: int = 0
    backoff: int = 2
    caffe2_failing_every: int = 2
    caffe2_failures: int = 1
    ruled: int = 0

    @property
    def jobs(self) -> int:
        return self.mx + self.caffe2 + self.tf + self.ruled

    def ruled_shapes(self) -> dict[str, str]:
        """The jobs with failure rules: name -> shape."""
        shapes = sorted(SHAPES)
        return {f"r{i}": shapes[i % len(shapes)] for i in range(self.ruled)}

    def title(self, kills: int) -> str:
        if not self.caffe2 and not self.tf and not self.ruled:
            return f"SIGKILL storm ({self.mx} jobs, {kills} kills)"
        kinds = ", ".join(f"{n} {k}" for n, k in (
            (self.mx, "MxJobs"), (self.caffe2, "Caffe2Jobs"), (self.tf, "TfJobs"),
            (self.ruled, "MxJobs with failure rules")) if n)
        return f"SIGKILL storm ({self.jobs} jobs: {kinds}; {kills} kills)"

    def manifests(self, rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, str],
                                                      dict[str, int]]:
        """The manifests (interleaved by kind), ``Kind/name`` -> the end each must reach,
        and the pod names that fail (one shard of each failing Caffe2Job) -> in how many
        consecutive attempts."""
        mx, c2, tf = [], [], []
        fail: dict[str, int] = {}
        expect = {}
        for i in range(self.mx):
            failing = bool(self.failing_every) and i % self.failing_every == 0
            mx.append(failing_job(f"s{i}", self.backoff) if failing else storm_job(f"s{i}"))
            expect[f"MxJob/s{i}"] = "Failed" if failing else "Succeeded"
        for i in range(self.caffe2):
            shards = 2 + i % 7
            c2.append(caffe2_job(f"c{i}", shards))
            expect[f"Caffe2Job/c{i}"] = "Succeeded"
            if self.caffe2_failing_every and i % self.caffe2_failing_every == 0:
                turn = i // self.caffe2_failing_every
                fail[f"c{i}-worker-{rng.randrange(shards)}"] = 1 + turn % self.caffe2_failures
        for i in range(self.tf):
            tf.append(tf_job(f"t{i}"))
            expect[f"TfJob/t{i}"] = "Succeeded"
        ruled = []
        for name, shape in self.ruled_shapes().items():
            ruled.append(ruled_job(name, shape))
            expect[f"MxJob/{name}"] = "Failed"
        mixed = [m for group in itertools.zip_longest(mx, c2, tf, ruled) for m in group if m]
        return mixed, expect, fail


def _tracebacks(operators: list[Operator]) -> list[str]:
    return [f"{op.name}: {r.get('msg')} {r.get('exception', '')}"[:400]
            for op in operators for r in op.records()
            if TRACEBACK.search(f"{r.get('msg', '')} {r.get('exception', '')}")]


def _finish(env: ChaosEnv, figures: Figures, watch: StatusWatch, names: list[str],
            budget: float, audit0: int, pods: PodWatch | None = None,
            allowed: dict[str, int] | None = None) -> float:
    """Wait for the jobs, then fill in the figures; returns when (wall clock) all ended.
    ``allowed``: pod name -> the creates its job asks for, where more than the audit log's
    removals (failure rules' restarts)."""
    figures.jobs = len(names)
    figures.lost = wait_finished(watch, names, budget, env.operators.started[-1:])
    figures.finished = len(names) - len(figures.lost)
    finished_at = time.time()
    figures.orphans = find_orphans(env.ns, ("MxJob", "TfJob", "Caffe2Job"))
    if pods is not None:
        time.sleep(1.0)  # the pod watch catches up with the last deletes
    audit_figures(figures, env.plane, env.ns.name, audit0,
                  {**(pods.attempts_by_name() if pods is not None else {}), **(allowed or {})}
                  or None)
    figures.statuses_seen = watch.seen
    figures.double_true = list(watch.double_true)
    figures.finished_flips = list(watch.finished_flips)
    bad = _tracebacks(env.operators.started)
    if bad:
        figures.notes.append(f"tracebacks in the operator log: {bad[:3]}")
        figures.extra["tracebacks"] = len(bad)
    return finished_at


def sigkill_storm(env: ChaosEnv, mix: StormMix, *, kills: int, budget: float,
                  seed: int = 15) -> Figures:
    """``mix``'s jobs created at once while the operator is SIGKILLed ``kills`` times (1-3 s
    apart, restarted at once). Besides the audit log's figures, a pod watch counts per kind
    the attempts alive at once and the pods created twice within one attempt, and every job
    must end as its spec says (a failing MxJob Failed, every other job Succeeded). Recovery:
    kill to the new operator's /readyz."""
    rng = random.Random(seed)
    figures = Figures(mix.title(kills))
    audit0 = env.plane.audit_offset()
    manifests, expect, fail = mix.manifests(rng)
    kinds = sorted({m["kind"] for m in manifests})
    with timed(figures), StatusWatch(env.plane, env.ns.name, kinds) as watch, \
            FailAttempts(env.plane, env.ns.name, fail) as failer, \
            PodWatch(env.plane, env.ns.name, on_pod=failer.consider) as pods:
        op = env.operators.start("--log-level", "info")
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
        t_last = time.time()
        allowed = allowed_creates(mix.ruled_shapes())
        finished_at = _finish(env, figures, watch, names, budget, audit0, pods, allowed)
        figures.recovery_s["last kill to all finished"] = finished_at - t_last
        _kind_figures(figures, pods, env, audit0, failer, allowed)
        _attempt_figures(figures, pods, watch, failer, env, audit0, manifests)
        _rule_figures(figures, pods, watch, mix.ruled_shapes())
        ended = watch.finished()
        wrong = [f"{key} {ended[key]} (expected {want})" for key, want in expect.items()
                 if key in ended and ended[key] != want]
        figures.lost += wrong
        figures.finished -= len(wrong)
    return figures


def _kind_figures(figures: Figures, pods: PodWatch, env: ChaosEnv, audit0: int,
                  failer: FailAttempts, allowed: dict[str, int]) -> None:
    """Per kind, from the pod watch and the audit log: jobs, pods, attempts, overlaps,
    recreations within an attempt, duplicates (``allowed``: as `_finish`'s)."""
    kind_of = pods.kind_of()
    histories = pod_histories(env.plane.audit_events(audit0), env.ns.name)
    per_kind = {kind: kf.to_json() for kind, kf in pods.figures().items()}
    attempts = {**pods.attempts_by_name(), **allowed}
    for name, history in histories.items():
        kind = kind_of.get(name, "unknown")
        entry = per_kind.setdefault(kind, {})
        dup = max(0, history.creates() - attempts[name]) if name in attempts else \
            history.duplicates()
        entry["duplicates"] = entry.get("duplicates", 0) + dup
    figures.per_kind = per_kind
    if failer.targets:
        failed = set(failer.failed)
        figures.extra["fail_attempts"] = {
            "chosen": len(failer.targets),
            "attempts_to_fail": sum(failer.targets.values()),
            "failed": failer.injected(),
            "not_failed": sorted(set(failer.targets) - failed)[:10],
            "patch_errors": failer.errors[:5]}
    figures.extra["pod_watch_relists"] = pods.relists


def _attempt_figures(figures: Figures, pods: PodWatch, watch: StatusWatch,
                     failer: FailAttempts, env: ChaosEnv, audit0: int,
                     manifests: list[dict[str, Any]]) -> None:
    """Issue 36, for the kinds whose replicas restart together: the attempts that ended
    without a cause (must be 0), and the restarts each job's status counts against the
    failures made (a job counting more restarts than it had failures counted one of nothing;
    fewer is possible: a failure in an attempt already ending is not the job's)."""
    shards = {m["metadata"]["name"]: sum(int(r.get("replicas", 1)) for r in
                                         m["spec"]["replicaSpecs"].values())
              for m in manifests if m["kind"] == "Caffe2Job"}
    if not shards:
        return
    histories = pod_histories(env.plane.audit_events(audit0), env.ns.name)
    taken = {w.uid for h in histories.values() for w in h.writes
             if w.verb == "delete" and w.code == 200 and w.uid and w.agent != "operator"}
    without = pods.attempts_without_cause(shards, taken)
    restarts = made = 0
    over = []
    for name in shards:
        status = (watch.latest.get(("Caffe2Job", name)) or {}).get("status") or {}
        counted = sum(int(r.get("restarts") or 0)
                      for r in (status.get("replicaStatuses") or {}).values())
        injected = sum(len(u) for n, u in failer.failed.items() if n.startswith(f"{name}-"))
        restarts, made = restarts + counted, made + injected
        if counted > injected:
            over.append(f"{name}: {counted} restarts, {injected} failures")
    entry = figures.per_kind.setdefault("Caffe2Job", {})
    entry.update(attempts_without_cause=len(without), restarts_counted=restarts,
                 failures_made=made, restarts_over_failures=len(over))
    entry["examples"] = [*entry.get("examples", []), *without[:5], *over[:5]][:10]


def _rule_figures(figures: Figures, pods: PodWatch, watch: StatusWatch,
                  shapes: dict[str, str]) -> None:
    """Issue 39: per job with failure rules, its counts and actions against what KWOK did
    (tests/chaos/ruled.py); a difference is a problem (``rule_mismatches``)."""
    if not shapes:
        return
    creates = pods.made_by_name()
    failed = pods.failed_by_name()
    wrong = []
    for name, shape in shapes.items():
        status = (watch.latest.get(("MxJob", name)) or {}).get("status") or {}
        wrong += check_ruled(name, shape, status, creates, failed[f"{name}-worker-0"])
    figures.rule_mismatches = wrong
    figures.extra["failure_rules"] = {
        "jobs": len(shapes), "shapes": dict(sorted(Counter(shapes.values()).items())),
        "decisions": sum(SHAPES[s].failures for s in shapes.values()),
        "jobs_matching": len(shapes) - len({w.split(" (")[0] for w in wrong})}


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


#: The leader election the leader scenario runs with (seconds): the standby takes the lease
#: once it is LEASE past the dead leader's last renewal, trying every RETRY.
LEASE, RENEW, RETRY = 4.0, 3.0, 1.0


def leader_kill(env: ChaosEnv, *, jobs: int, budget: float) -> Figures:
    """Two operators with leader election; the leader is SIGKILLed halfway through a burst of
    ``jobs`` creates. Recovery: kill to the standby taking the Lease (its acquireTime, written
    by the standby as it decides: no log or poll latency), and kill to the time on its
    "became leader" log record. ``extra['lease']``: the dead leader's last renewTime and
    the standby's acquireTime (epoch seconds), so a test can hold the election's bounds."""
    figures = Figures(f"leader SIGKILL during a burst ({jobs} jobs, lease {LEASE:g} s)")
    audit0 = env.plane.audit_offset()
    args = ("--leader-elect", "--leader-election-namespace", env.ns.name,
            "--leader-election-id", "chaos-leader", "--lease-duration", f"{LEASE:g}",
            "--renew-deadline", f"{RENEW:g}", "--retry-period", f"{RETRY:g}",
            "--log-level", "info")
    with timed(figures), StatusWatch(env.plane, env.ns.name, ("MxJob",)) as watch:
        a = env.operators.start(*args, name="a")
        a.wait_logged("became leader")
        b = env.operators.start(*args, name="b")
        half = jobs // 2
        names = create_all(env.ns, [storm_job(f"l{i}") for i in range(half)])
        a.kill()
        killed_wall = time.time()
        # A renewal a sent just before it died has landed by now; the lease has not expired.
        time.sleep(0.5)
        dead = _lease(env)
        names += create_all(env.ns, [storm_job(f"l{i}") for i in range(half, jobs)])
        became = b.wait_logged("became leader", timeout=60)
        # The standby's own log time: the burst's second half was created meanwhile, so the
        # moment this test reads the line says nothing of the takeover.
        logged = epoch_of(str(became.get("time", "")))
        if logged is not None:
            figures.recovery_s["leader kill to standby logging it leads"] = logged - killed_wall
        taken = _lease(env)
        if taken.get("holderIdentity") == dead.get("holderIdentity"):
            figures.lost.append(f"the lease still names the dead leader: {taken}")
        acquired = epoch_of(str(taken.get("acquireTime", ""))) or 0.0
        renewed = epoch_of(str(dead.get("renewTime", ""))) or 0.0
        figures.recovery_s["leader kill to lease taken"] = acquired - killed_wall
        figures.extra["lease"] = {"killed": killed_wall, "last_renew": renewed,
                                  "acquired": acquired, "dead": dead, "taken": taken}
        figures.faults = 1
        _finish(env, figures, watch, names, budget, audit0)
    return figures


def _lease(env: ChaosEnv) -> dict[str, Any]:
    """The spec of the scenario's Lease."""
    resp = env.plane.api().request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{env.ns.name}/leases/chaos-leader",
        timeout=10)
    if resp.status != 200:
        raise AssertionError(f"GET the lease: {resp.status} {resp.body[:300]!r}")
    spec: dict[str, Any] = resp.json().get("spec") or {}
    return spec


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
