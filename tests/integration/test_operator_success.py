"""The operator on the real control plane: each kind's success rule, and the pods and headless
Services it creates (names, labels, owner references, the environment contract).

The tests share one operator subprocess per module, each in a namespace of its own; pods
end through KWOK annotations (see operator_helpers)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.integration.operator_helpers import (
    API_VERSION,
    Namespace,
    condition,
    env_of,
    job,
    replica,
    true_conditions,
)

pytestmark = pytest.mark.integration

FRAMEWORK = {"MxJob": "mxnet", "TfJob": "tensorflow", "Caffe2Job": "caffe2"}
PORT = {"MxJob": 9091, "TfJob": 2222, "Caffe2Job": 2222}
# Replica types whose framework does not listen on the port get no containerPort.
SILENT = {("MxJob", "Server"), ("MxJob", "Worker"), ("Caffe2Job", "Worker"),
          ("TfJob", "Evaluator")}
ROLE = "trainjobs.io/job-role"


def check_owned(
    ns: Namespace, created: dict[str, Any], replicas: dict[str, int], masters: set[str]
) -> dict[str, dict[str, Any]]:
    """The pods and Services of a job: one of each per replica, named ``<job>-<type>-<i>``,
    labelled, controlled by the job; returns the pods by name."""
    kind, name, uid = created["kind"], created["metadata"]["name"], created["metadata"]["uid"]
    framework = FRAMEWORK[kind]
    expected = {f"{name}-{t.lower()}-{i}": (t, i) for t, n in replicas.items() for i in range(n)}
    pods = {p["metadata"]["name"]: p for p in ns.pods(name)
            if "trainjobs.io/replica-index" in p["metadata"]["labels"]}
    services = {s["metadata"]["name"]: s for s in ns.services(name)
                if "trainjobs.io/replica-index" in s["metadata"]["labels"]}
    assert set(pods) == set(expected), sorted(pods)
    assert set(services) == set(expected), sorted(services)
    owner = {"apiVersion": API_VERSION, "kind": kind, "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}
    for obj_name, (rtype, index) in expected.items():
        labels = {
            "trainjobs.io/job-name": name,
            "trainjobs.io/framework": framework,
            "trainjobs.io/replica-type": rtype.lower(),
            "trainjobs.io/replica-index": str(index),
        }
        pod, svc = pods[obj_name], services[obj_name]
        for obj in (pod, svc):
            assert obj["metadata"]["ownerReferences"] == [owner], obj["metadata"]
            assert labels.items() <= obj["metadata"]["labels"].items(), obj["metadata"]
        role = pod["metadata"]["labels"].get(ROLE)
        assert role == ("master" if obj_name in masters else None), (obj_name, role)
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"].items() >= labels.items()
        assert [p["port"] for p in svc["spec"]["ports"]] == [PORT[kind]]
        main = next(c for c in pod["spec"]["containers"] if c["name"] == framework)
        if (kind, rtype) in SILENT:
            assert "ports" not in main, main["ports"]
        else:
            assert {"containerPort": PORT[kind], "protocol": "TCP"}.items() <= \
                main["ports"][0].items(), main["ports"]
        assert pod["spec"]["restartPolicy"] == "Never"
    return pods


def test_success_rule_of_each_kind_and_what_the_operator_creates(
    ns: Namespace
) -> None:
    mx = ns.apply(job("MxJob", "mx", {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob", 2),
        "Worker": replica("MxJob", 2, exit_code=0, run="3s"),
    }, runPolicy={"cleanPodPolicy": "Running"}))
    tf = ns.apply(job("TfJob", "tf-chief", {
        "Chief": replica("TfJob", exit_code=0, run="3s"),
        "Worker": replica("TfJob", 2),
        "PS": replica("TfJob"),
    }))
    tfw = ns.apply(job("TfJob", "tf-workers", {"Worker": replica("TfJob", 3)}))
    c2 = ns.apply(job("Caffe2Job", "c2", {"Worker": replica("Caffe2Job", 2)}))

    # What was created, checked while everything runs.
    ns.wait_state("TfJob", "tf-workers", "Running")
    ns.wait_state("Caffe2Job", "c2", "Running")
    mx_pods = check_owned(ns, mx, {"Scheduler": 1, "Server": 2, "Worker": 2}, set())
    tf_pods = check_owned(ns, tf, {"Chief": 1, "Worker": 2, "PS": 1}, {"tf-chief-chief-0"})
    check_owned(ns, tfw, {"Worker": 3}, {"tf-workers-worker-0"})
    c2_pods = check_owned(ns, c2, {"Worker": 2}, set())

    env = env_of(mx_pods["mx-worker-1"], "mxnet")
    assert {k: env[k] for k in ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                                "DMLC_NUM_SERVER", "DMLC_NUM_WORKER", "DMLC_USE_KUBERNETES",
                                "DMLC_WORKER_ID")} == {
        "DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "mx-scheduler-0", "DMLC_PS_ROOT_PORT": "9091",
        "DMLC_NUM_SERVER": "2", "DMLC_NUM_WORKER": "2", "DMLC_USE_KUBERNETES": "1",
        "DMLC_WORKER_ID": "1"}
    mx_config = json.loads(env["MX_CONFIG"])
    assert mx_config["task"] == {"type": "worker", "index": 1}
    assert mx_config["cluster"]["server"] == [{"url": f"mx-server-{i}", "port": 9091}
                                              for i in range(2)]
    assert env_of(mx_pods["mx-scheduler-0"], "mxnet")["DMLC_ROLE"] == "scheduler"
    assert env_of(mx_pods["mx-server-1"], "mxnet")["DMLC_ROLE"] == "server"

    tf_config = json.loads(env_of(tf_pods["tf-chief-worker-1"], "tensorflow")["TF_CONFIG"])
    assert tf_config == {
        "cluster": {"chief": ["tf-chief-chief-0:2222"],
                    "worker": ["tf-chief-worker-0:2222", "tf-chief-worker-1:2222"],
                    "ps": ["tf-chief-ps-0:2222"]},
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    shard = env_of(c2_pods["c2-worker-1"], "caffe2")
    assert shard["SHARD_ID"] == "1" and shard["NUM_SHARDS"] == "2"
    # One RUN_ID per attempt of the rendezvous: <job uid>-<attempt>, the first attempt 0.
    assert shard["RUN_ID"] == f"{c2['metadata']['uid']}-0" == env_of(c2_pods["c2-worker-0"],
                                                                     "caffe2")["RUN_ID"]
    assert json.loads(shard["CAFFE2_CONFIG"]) == {
        "cluster": {"worker": ["c2-worker-0:2222", "c2-worker-1:2222"]},
        "task": {"type": "worker", "index": 1}}
    # Two shards without a redisHost: a Redis owned by the job, and the shards pointed at it.
    redis = ns.pod("c2-redis")
    assert redis is not None and redis["metadata"]["ownerReferences"][0]["uid"] == \
        c2["metadata"]["uid"]
    assert shard["REDIS_HOST"].startswith("c2-redis") and shard["REDIS_PORT"] == "6379"

    # MxJob: all workers exit 0 -> Succeeded; the scheduler and servers (still running) are
    # deleted by cleanPodPolicy Running, the finished workers stay.
    ns.wait_condition("MxJob", "mx", "Succeeded")
    ns.wait_pods("mx", {"mx-worker-0": "Succeeded", "mx-worker-1": "Succeeded"})
    status = ns.status("MxJob", "mx")
    assert status["state"] == "Succeeded" and true_conditions(status) == ["Created",
                                                                          "Succeeded"]
    assert condition(status, "Running") is not None  # it ran, and is no longer Running
    assert status["replicaStatuses"]["Worker"]["succeeded"] == 2
    assert status["startTime"] <= status["completionTime"]
    assert status["observedGeneration"] == 1

    # TfJob with a Chief: the chief's exit 0 decides, with its workers still running.
    ns.wait_condition("TfJob", "tf-chief", "Succeeded")
    ns.wait_pods("tf-chief", {"tf-chief-chief-0": "Succeeded"})

    # TfJob without a Chief: worker 0 decides; another worker finishing first does not.
    ns.end_pod("tf-workers-worker-1")
    ns.wait_pods("tf-workers", {"tf-workers-worker-0": "Running",
                                "tf-workers-worker-1": "Succeeded",
                                "tf-workers-worker-2": "Running"})
    time.sleep(1.5)  # the operator has seen it
    assert ns.status("TfJob", "tf-workers")["state"] == "Running"
    ns.end_pod("tf-workers-worker-0")
    ns.wait_condition("TfJob", "tf-workers", "Succeeded")
    ns.wait_pods("tf-workers", {"tf-workers-worker-0": "Succeeded",
                                "tf-workers-worker-1": "Succeeded"})

    # Caffe2Job: every worker must succeed.
    ns.end_pod("c2-worker-0")
    ns.wait_pods("c2", {"c2-worker-0": "Succeeded", "c2-worker-1": "Running",
                        "c2-redis": "Running"})
    time.sleep(1.5)
    assert ns.status("Caffe2Job", "c2")["state"] == "Running"
    ns.end_pod("c2-worker-1")
    ns.wait_condition("Caffe2Job", "c2", "Succeeded")
    assert ns.status("Caffe2Job", "c2")["replicaStatuses"]["Worker"]["succeeded"] == 2
    # The managed Redis served the shards; cleanPodPolicy Running deletes it with the job done.
    ns.wait_pods("c2", {"c2-worker-0": "Succeeded", "c2-worker-1": "Succeeded"})

    # kubectl shows the state in its printer columns.
    table = ns.kubectl("get", "trainjobs", "--no-headers").stdout
    states = {line.split()[0]: line.split()[1] for line in table.splitlines()}
    assert states == {"mxjob.trainjobs.io/mx": "Succeeded",
                      "tfjob.trainjobs.io/tf-chief": "Succeeded",
                      "tfjob.trainjobs.io/tf-workers": "Succeeded",
                      "caffe2job.trainjobs.io/c2": "Succeeded"}, table


def test_tfjob_all_workers_success_policy(ns: Namespace) -> None:
    """``successPolicy: AllWorkers``: worker 0 alone does not decide; no pod is the master."""
    ns.apply(job("TfJob", "all", {"Worker": replica("TfJob", 2)}, successPolicy="AllWorkers"))
    ns.wait_state("TfJob", "all", "Running")
    assert all(ROLE not in p["metadata"]["labels"] for p in ns.pods("all"))
    ns.end_pod("all-worker-0")
    ns.wait_pods("all", {"all-worker-0": "Succeeded", "all-worker-1": "Running"})
    time.sleep(1.5)
    assert ns.status("TfJob", "all")["state"] == "Running"
    ns.end_pod("all-worker-1")
    ns.wait_condition("TfJob", "all", "Succeeded")
