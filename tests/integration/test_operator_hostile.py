"""Hostile neighbours on the real control plane (issue 15.3, 15.4, 15.1a): objects that carry
trainjobs' labels but belong to no job of ours, two jobs of different kinds with one name, and
a job over the operator's configured maximum. Each is handled without an error in the log,
and a job beside them runs as usual."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.fault_proxy import FaultProxy
from tests.integration.operator_helpers import (
    LABEL_JOB,
    Namespace,
    Operators,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ControlPlane

pytestmark = pytest.mark.integration

RELIST = r"listing again|failed unexpectedly"


def _pod(name: str, labels: dict[str, str], owner: dict[str, str] | None = None
         ) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "x", "image": "example.invalid/x:1"}]}}


def test_labelled_objects_of_no_job_of_ours_are_ignored(
    bare_ns: Namespace, operators: Operators
) -> None:
    """`kubectl run stray --labels=trainjobs.io/job-name=nobody`, then deleting it, crashed the
    pod informer (an assert on a cache entry) and made it re-list every pod; so did the
    TensorBoard pod of a TfJob deleted by TTL (owned by a ReplicaSet, labelled as ours)."""
    op = operators.start()
    bare_ns.kubectl("run", "stray", "--image=example.invalid/x:1",
                    f"--labels={LABEL_JOB}=nobody")
    rs_owned = _pod("tensorboard-like", {LABEL_JOB: "gone", "trainjobs.io/framework":
                                         "tensorflow"})
    bare_ns.kubectl("create", "-f", "-", input=json.dumps(rs_owned))
    bare_ns.kubectl("label", "pod", "stray", "extra=1")  # a MODIFIED event as well
    for name in ("stray", "tensorboard-like"):
        bare_ns.kubectl("delete", "pod", name, "--wait=true")
    # A job created after the deletes: the pod watch delivers its pods' events after theirs,
    # so when it has succeeded the operator has handled the stray pods' events.
    bare_ns.apply(job("MxJob", "beside", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2, exit_code=0)}))
    bare_ns.wait_condition("MxJob", "beside", "Succeeded", timeout=45)
    assert not op.logged(RELIST), op.tail()
    assert op.problems() == [], op.tail()
    assert op.ready()


def test_a_job_never_adopts_objects_of_another_kind_with_its_name(
    bare_ns: Namespace, operators: Operators
) -> None:
    """MxJob `clash`, then TfJob `clash`: the 409 on `clash-worker-0` was taken as "already
    exists", the TfJob's TF_CONFIG pointed at the MxJob's Services and it Succeeded without
    its Workers ever running. Now the TfJob fails, naming the owner; the MxJob runs on."""
    operators.start()
    bare_ns.apply(job("MxJob", "clash", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2)}))  # Workers run until deleted
    bare_ns.wait_state("MxJob", "clash", "Running", timeout=45)
    mx_pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in bare_ns.pods("clash")}
    mx_uid = bare_ns.job("MxJob", "clash")["metadata"]["uid"]  # type: ignore[index]

    bare_ns.apply(job("TfJob", "clash", {
        "Chief": replica("TfJob", exit_code=0, run="3s"),
        "Worker": replica("TfJob", 2, exit_code=0, run="3s")}))
    status = bare_ns.wait_finished("TfJob", "clash", timeout=45)
    failed = condition(status, "Failed")
    assert status["state"] == "Failed" and failed is not None, status
    assert failed["reason"] == "NameConflict", failed
    assert f"MxJob clash (uid {mx_uid})" in failed["message"], failed
    assert "clash-worker-" in failed["message"], failed
    bare_ns.wait_event("clash", "NameConflict")

    # The MxJob's objects were neither adopted nor touched; it keeps running.
    for name, uid in mx_pods.items():
        pod = bare_ns.pod(name)
        assert pod is not None and pod["metadata"]["uid"] == uid, name
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("MxJob", mx_uid), owner
    assert bare_ns.status("MxJob", "clash")["state"] == "Running"
    # Whatever the TfJob did create is its own, and cleanPodPolicy Running removes it.
    def tf_pods_gone() -> bool:
        return not [p for p in bare_ns.pods("clash")
                    if p["metadata"]["ownerReferences"][0]["kind"] == "TfJob"]

    wait_for(tf_pods_gone, "the TfJob's own pods to be cleaned up", timeout=30)


def test_a_job_over_the_operators_maximum_fails_naming_the_limit(
    bare_ns: Namespace, operators: Operators
) -> None:
    """The CRD allows up to its maximum; an operator run with a lower --max-replicas-per-job
    refuses a larger job with InvalidSpec naming that limit, before rendering anything."""
    operators.start("--max-replicas-per-job", "10")
    bare_ns.apply(job("Caffe2Job", "wide", {"Worker": replica("Caffe2Job", 11)},
                      backend={"type": "redis", "redisHost": "redis.invalid"}))
    bare_ns.apply(job("Caffe2Job", "fits", {"Worker": replica("Caffe2Job", 10, exit_code=0)},
                      backend={"type": "redis", "redisHost": "redis.invalid"}))
    status = bare_ns.wait_finished("Caffe2Job", "wide", timeout=30)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec", status
    assert "11 replicas" in failed["message"], failed
    assert "maximum of 10 per job" in failed["message"], failed
    assert "--max-replicas-per-job" in failed["message"], failed
    assert bare_ns.pods("wide") == []
    bare_ns.wait_condition("Caffe2Job", "fits", "Succeeded", timeout=45)


def test_after_an_api_server_outage_watches_are_back_within_seconds_and_readyz_says_so(
    kube_cluster: ControlPlane, bare_ns: Namespace, operators: Operators, tmp_path: Path
) -> None:
    """The API server is gone for 17 s (every connection reset, open watches cut): /readyz
    turns 503 after --ready-api-timeout, and once the API server answers again the operator's
    watches are back within a second or two (they backed off to 16 s and lagged ~15.6 s): a
    job created right then gets its pods at once, and /readyz is 200 again."""
    with FaultProxy(kube_cluster, log=tmp_path / "fault-proxy.log") as proxy:
        kubeconfig = proxy.kubeconfig(tmp_path / "through-proxy.kubeconfig")
        op = operators.start("--kubeconfig", str(kubeconfig), "--ready-api-timeout", "3",
                             "--request-timeout", "2", name="outage", timeout=90)
        bare_ns.apply(job("TfJob", "before", {"Chief": replica("TfJob"),
                                              "Worker": replica("TfJob", 2)}))
        bare_ns.wait_state("TfJob", "before", "Running", timeout=45)
        assert op.ready()

        # (The clock starts before the cut: go_down returns after the watches are cut, and the
        # operator may see its first failure before then.)
        down_at = time.monotonic()
        proxy.go_down()
        wait_for(lambda: op.http("/readyz")[0] == 503, "/readyz 503 while the API is gone",
                 timeout=10, interval=0.1)
        not_ready_after = time.monotonic() - down_at
        assert 3.0 <= not_ready_after < 8.0, not_ready_after
        assert "has not answered" in op.http("/readyz")[1]
        time.sleep(max(0.0, 17.0 - (time.monotonic() - down_at)))
        assert op.http("/healthz")[0] == 200, "liveness must not fail: a restart fixes nothing"

        proxy.come_up()
        up_at = time.monotonic()
        bare_ns.apply(job("TfJob", "after", {"Chief": replica("TfJob"),
                                             "Worker": replica("TfJob", 2)}))
        wait_for(lambda: len(bare_ns.pods("after")) == 3, "the new job's pods", timeout=30,
                 interval=0.05)
        caught_up = time.monotonic() - up_at
        wait_for(op.ready, "/readyz 200 after the outage", timeout=10, interval=0.1)
        print(f"not ready {not_ready_after:.1f}s into the outage; pods of a job created as the "
              f"API server came back after {caught_up:.2f}s")
        assert caught_up < 3.0, f"the operator lagged the API server by {caught_up:.1f}s"
        assert bare_ns.status("TfJob", "before")["state"] == "Running"
        assert op.problems() == [], op.tail()
