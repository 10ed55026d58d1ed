"""Kueue's manageJobsWithoutQueueName for the operator (--manage-jobs-without-queue-name):
a job without the queue label in a namespace the selector matches gets a Workload (no queue
name, so Kueue leaves it pending) and no pod until it is labelled and admitted; elsewhere, or
with the option off, it runs exactly as without Kueue. On the fake API, passes run by the test.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from tests.unit.controller_harness import NS, TFJOBS, Harness, queueing_controller
from trainjobs.kube.selector import parse_selector
from trainjobs.kueue.reconcile import KueueSettings
from trainjobs.operator.gates.kueue import NAMESPACES, WORKLOADS

MANAGED = KueueSettings(manage_jobs_without_queue_name=True,
                        managed_jobs_namespace_selector=parse_selector("kueue=on"))


def with_kueue(settings: KueueSettings, ns_labels: dict[str, str]
               ) -> AbstractAsyncContextManager[Harness]:
    return queueing_controller(settings, ns_labels)


def workloads(h: Harness) -> list[dict[str, object]]:
    return h.kube.of(WORKLOADS, NS)


async def test_an_unlabelled_job_in_a_managed_namespace_waits_for_a_queue() -> None:
    async with with_kueue(MANAGED, {"kueue": "on"}) as h:
        assert any(i.resource == NAMESPACES for i in h.kueue.informers)
        h.submit("tf", Worker=2)
        await h.reconcile("tf")
        [wl] = workloads(h)
        assert "queueName" not in wl["spec"]  # type: ignore[operator]  # (the CRD refuses "")
        assert not h.pod_names()
        assert h.status()["state"] == "Queued"


async def test_an_unlabelled_job_elsewhere_runs_as_without_kueue() -> None:
    async with with_kueue(MANAGED, {"kueue": "off"}) as h:
        h.submit("tf", Worker=2)
        await h.reconcile("tf")
        assert not workloads(h) and len(h.pod_names()) == 2


async def test_off_by_default_and_no_namespace_watch() -> None:
    async with with_kueue(KueueSettings(), {"kueue": "on"}) as h:
        assert not any(i.resource == NAMESPACES for i in h.kueue.informers)
        h.submit("tf", Worker=2)
        await h.reconcile("tf")
        assert not workloads(h) and len(h.pod_names()) == 2


async def test_a_namespace_label_change_reconciles_its_jobs() -> None:
    async with with_kueue(MANAGED, {"kueue": "off"}) as h:
        h.submit("tf", Worker=2)
        await h.sync()
        key = h.key("tf")
        h.controller.queue._queued.discard(key)
        ns = h.kube.objects[(NAMESPACES.plural, "", NS)]
        ns["metadata"]["labels"] = {"kueue": "on"}
        h.kube.put(NAMESPACES, ns)
        await h.sync()
        assert key in h.controller.queue._queued
        assert h.kueue.namespace_labels[NS] == {"kueue": "on"}



async def test_a_queue_name_given_later_moves_the_workload() -> None:
    """The label changes without a new generation: the pass must read it anyway."""
    async with with_kueue(MANAGED, {"kueue": "on"}) as h:
        h.submit("tf", Worker=2)
        await h.reconcile("tf")
        await h.reconcile("tf")  # (PodsReady WaitForStart applied)
        doc = h.job()
        doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
        h.kube.put(TFJOBS, doc)
        await h.reconcile("tf")
        [wl] = workloads(h)
        assert wl["spec"]["queueName"] == "team-a"  # type: ignore[index]
        assert not h.pod_names()
