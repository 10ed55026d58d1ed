"""Caffe2Job's shards restart together on the real control plane: one shard ends with exit
137, the operator deletes every shard's pod and creates them again as attempt 1 (annotation
trainjobs.io/attempt, RUN_ID <uid>-1, restartPolicy Never), the peers' own failures in the
broken attempt are not counted, and the job Succeeds within backoffLimit 1."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace, env_of, job, replica, wait_for
from trainjobs.testing import EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION

pytestmark = pytest.mark.integration


def test_one_shard_killed_restarts_all_as_a_new_attempt(ns: Namespace) -> None:
    created = ns.apply(job("Caffe2Job", "shards", {
        "Worker": replica("Caffe2Job", 2, restart_policy="OnFailure")},
        backend={"type": "nfs", "nfsPath": "/shared"}, runPolicy={"backoffLimit": 1}))
    uid = created["metadata"]["uid"]
    ns.wait_state("Caffe2Job", "shards", "Running")
    first = {p["metadata"]["name"]: p for p in ns.pods("shards")}
    for pod in first.values():
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["metadata"]["annotations"]["trainjobs.io/attempt"] == "0"
        assert env_of(pod, "caffe2")["RUN_ID"] == f"{uid}-0"

    # Shard 1 is killed; its peer, whose Gloo group broke, fails a moment later. (One
    # kubectl call: a second one could reach the pod of the next attempt, which takes the
    # name as soon as the operator has recreated it.)
    ns.kubectl("annotate", "pod", "shards-worker-1", "shards-worker-0", "--overwrite",
               f"{EXIT_CODE_ANNOTATION}=137", f"{RUN_DURATION_ANNOTATION}=0s")

    def second_attempt() -> dict[str, dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in ns.pods("shards")}
        fresh = {n: p for n, p in pods.items() if p["metadata"]["uid"] != first[n]["metadata"]
                 ["uid"] and not p["metadata"].get("deletionTimestamp")} if \
            set(pods) == set(first) else {}
        return fresh if len(fresh) == 2 else None

    pods = wait_for(second_attempt, lambda: f"both shards recreated, have "
                    f"{ns.pod_summary('shards')}", timeout=60)
    for pod in pods.values():
        assert pod["metadata"]["annotations"]["trainjobs.io/attempt"] == "1"
        assert env_of(pod, "caffe2")["RUN_ID"] == f"{uid}-1"
    status = ns.status("Caffe2Job", "shards")
    assert status["attempt"] == 1, status
    assert status["replicaStatuses"]["Worker"]["restarts"] == 1, status
    assert "RestartingTogether" in ns.event_reasons("shards")

    ns.wait_state("Caffe2Job", "shards", "Running")
    for name in pods:
        ns.end_pod(name, exit_code=0)
    ns.wait_condition("Caffe2Job", "shards", "Succeeded")
    status = ns.status("Caffe2Job", "shards")
    assert status["replicaStatuses"]["Worker"]["restarts"] == 1 and status["attempt"] == 1
