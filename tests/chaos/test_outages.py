"""The API server (and etcd) SIGKILLed and started again mid-run, through the harness's
supported ``ControlPlane.restart``: every job still ends, nothing is duplicated or orphaned,
and the operator acts again soon after the API server is back."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.chaos.harness import ChaosEnv
from tests.chaos.scenarios import component_outage, storm_job
from tests.integration.operator_helpers import Namespace, wait_for
from trainjobs.testing import ControlPlaneError

pytestmark = pytest.mark.integration


def test_api_server_restart_mid_run(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(component_outage(
        chaos_env, "kube-apiserver", jobs=6, down=3, budget=90))
    assert figures.problems() == []
    assert figures.finished == 6


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_api_server_killed_for_15_s_with_50_jobs(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(component_outage(
        chaos_env, "kube-apiserver", jobs=50, down=15, budget=240))
    assert figures.problems() == []


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_etcd_killed_for_10_s_with_50_jobs(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(component_outage(chaos_env, "etcd", jobs=50, down=10,
                                                budget=240))
    assert figures.problems() == []


def test_a_component_that_dies_is_named_with_its_log(chaos_env: ChaosEnv) -> None:
    """A component that exits on its own (kube-scheduler did, "Scheduler cache is corrupted",
    after an API server restart) is reported by name, exit status and log tail - by
    ``check_alive``, which the fixtures call around every test - instead of leaving pods
    Pending; ``start_component`` brings it back."""
    plane = chaos_env.plane
    os.kill(plane.pids["kube-scheduler"], signal.SIGKILL)
    wait_for(lambda: plane.dead(), "the scheduler to be seen dead", 10)
    with pytest.raises(ControlPlaneError) as raised:
        plane.check_alive()
    message = str(raised.value)
    assert "kube-scheduler exited (status -9)" in message, message
    assert "kube-scheduler.log" in message and "\n" in message, message
    assert [d.split()[0] for d in plane.dead()] == ["kube-scheduler"]

    plane.start_component("kube-scheduler")
    plane.check_alive()
    chaos_env.operators.start()
    chaos_env.ns.create(storm_job("after", workers=1, run="1s"))
    chaos_env.ns.wait_condition("MxJob", "after", "Succeeded", timeout=60)


def test_a_pod_transition_kwok_dropped_is_played_after_an_etcd_restart(
    chaos_env: ChaosEnv,
) -> None:
    """The harness, not the operator (docs/control-plane.md, "Outages and the audit log"):
    KWOK v0.8.0 drops a pod's stage when its status patch fails with a 500, as it does while
    etcd is down, and nothing plays it again: a Worker stayed bound and Pending for good and
    the etcd outage scenario lost its job. A webhook that cannot be reached gives KWOK the
    same 500 here, deterministically; after the next etcd restart (which, unlike an API
    server restart, leaves KWOK's watches open) the harness's KWOK resync must bring the pod
    to Running."""
    plane, ns = chaos_env.plane, chaos_env.ns
    webhook = f"refuse-pod-status-{ns.name}"
    plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": webhook},
        "webhooks": [{
            "name": "refuse.chaos.trainjobs.io",
            "clientConfig": {"url": "https://127.0.0.1:1/refuse"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                       "resources": ["pods/status"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
            "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 1,
        }],
    }))
    try:
        time.sleep(2)  # the API server picks the webhook up
        ns.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stalled"},
            "spec": {"nodeName": plane.node_names[0],
                     "containers": [{"name": "c", "image": "example.invalid/c:1"}]}}))
        time.sleep(3)
        assert _phase(ns, "stalled") == "Pending"
    finally:
        plane.kubectl("delete", "validatingwebhookconfiguration", webhook)
    time.sleep(3)
    assert _phase(ns, "stalled") == "Pending", "KWOK played the dropped stage by itself"
    plane.restart("etcd", down=0, timeout=120)
    wait_for(lambda: _phase(ns, "stalled") == "Running", "the pod Running after the restart",
             timeout=30)


def _phase(ns: Namespace, name: str) -> str:
    pod = ns.pod(name)
    return "" if pod is None else str((pod.get("status") or {}).get("phase", ""))
