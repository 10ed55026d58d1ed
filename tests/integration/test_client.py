"""trainjobs.client on the real control plane: create from YAML, dict and model; get, list by
label, watch, wait, pods, events, logs (which KWOK nodes cannot serve), delete; a checkpoint
request (the annotation and the refusals); the sync wrapper; an unreachable cluster. The
module's shared operator runs the jobs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests.integration.operator_helpers import Namespace, job, replica
from trainjobs.api.models import Job
from trainjobs.client import (
    AmbiguousJob,
    AsyncClient,
    CheckpointRefused,
    Client,
    ClusterUnreachable,
    JobFailed,
    JobNotFound,
    LogsUnavailable,
    WaitTimeout,
    progress,
)
from trainjobs.errors import SpecInvalid
from trainjobs.kube import ApiConflict
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST

pytestmark = pytest.mark.integration


def mx(name: str, exit_code: int | None = 0, run: str = "2s", **meta: object) -> dict[str, object]:
    manifest = job("MxJob", name, {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2, exit_code=exit_code, run=run),
    })
    manifest["metadata"] = {"name": name, **meta}
    return manifest


async def test_create_in_three_forms_then_list_wait_pods_events_delete(ns: Namespace) -> None:
    async with AsyncClient(str(ns.plane.kubeconfig), ns.name) as client:
        from_yaml = await client.create(yaml.safe_dump(mx("from-yaml", labels={"team": "a"})))
        from_dict = await client.create(mx("from-dict", labels={"team": "b"}))
        model = client.parse(mx("from-model", run="60s", labels={"team": "a"}))[0][0]
        from_model = await client.create(model)
        assert isinstance(from_yaml, Job) and from_yaml.metadata.uid
        assert from_dict.namespace == ns.name and from_model.kind == "MxJob"

        team_a = await client.list(label_selector="team=a")
        assert sorted(j.name for j in team_a) == ["from-model", "from-yaml"]

        done = await client.wait("from-yaml", timeout=60)
        assert done.status.state == "Succeeded"
        assert done.status.replica_statuses["Worker"].succeeded == 2

        running = await client.wait("mxjob/from-model", until="Running", timeout=60)
        pods = await client.pods("from-model")
        assert sorted(p.replica for p in pods) == ["Scheduler-0", "Server-0", "Worker-0",
                                                   "Worker-1"]
        assert {p.phase for p in pods} == {"Running"}
        worker = next(r for r in progress(running, pods) if r.replica_type == "Worker")
        assert (worker.desired, worker.running, worker.pending) == (2, 2, 0)

        events = await client.events("from-yaml")
        reasons = {e.reason for e in events}
        assert "Scheduled" in reasons, reasons  # the pods' (from the scheduler)
        assert any(e.object == "MxJob/from-yaml" for e in events), events

        with pytest.raises(WaitTimeout) as timed_out:
            await client.wait("from-model", timeout=1)
        assert timed_out.value.job.status.state == "Running"

        gone = await client.delete("from-model", wait=True, timeout=30)
        assert gone.name == "from-model"
        with pytest.raises(JobNotFound):
            await client.get("from-model")
        assert ns.job("MxJob", "from-model") is None


async def test_failed_job_and_refusals(ns: Namespace) -> None:
    async with AsyncClient(str(ns.plane.kubeconfig), ns.name) as client:
        await client.create(mx("fails", exit_code=3, run="1s"))
        with pytest.raises(JobFailed) as failed:
            await client.wait("fails", timeout=60)
        assert failed.value.job.status.state == "Failed"
        assert "failed with exit code 3" in str(failed.value), failed.value

        with pytest.raises(ApiConflict) as exists:
            await client.create(mx("fails"))
        assert exists.value.already_exists
        with pytest.raises(SpecInvalid) as invalid:
            await client.create({**mx("bad"), "spec": {"replicaSpecs": {"Wrker": {}}}})
        assert "spec.replicaSpecs" in str(invalid.value)

        tf = job("TfJob", "fails", {"Worker": replica("TfJob", exit_code=0)})
        await client.create(tf)
        with pytest.raises(AmbiguousJob, match="mxjob/fails, tfjob/fails"):
            await client.get("fails")
        assert (await client.get("tfjob/fails")).kind == "TfJob"


async def test_logs_say_when_the_cluster_cannot_serve_them(ns: Namespace) -> None:
    async with AsyncClient(str(ns.plane.kubeconfig), ns.name) as client:
        await client.create(mx("logs", exit_code=None))
        await client.wait("logs", until="Running", timeout=60)
        with pytest.raises(LogsUnavailable, match="cannot serve the log of Worker-1"):
            async for _ in client.logs("logs", replica="Worker-1"):
                pass
        with pytest.raises(JobNotFound, match="no pod for replica 'Worker-7'"):
            async for _ in client.logs("logs", replica="Worker-7"):
                pass


def test_sync_client_from_a_yaml_file(ns: Namespace, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(yaml.safe_dump(mx("sync", run="1s"))))
    with Client(str(ns.plane.kubeconfig), ns.name) as client:
        created = client.create(path)
        states = []
        for version in client.watch("sync"):
            states.append(version.status.state)
            if version.status.state == "Succeeded":
                break
        assert created.name == "sync" and states[-1] == "Succeeded", states
        assert client.wait("sync", timeout=5).status.state == "Succeeded"
        assert [j.name for j in client.list()] == ["sync"]
        client.delete("sync")


def test_checkpoint_writes_the_annotation_or_refuses(ns: Namespace) -> None:
    """What the operator does with the annotation is tests/integration/test_checkpoint*'s."""
    asked = mx("asked", exit_code=None)
    asked["spec"]["runPolicy"] = {"checkpointTimeoutSeconds": 30}
    with Client(str(ns.plane.kubeconfig), ns.name) as client:
        client.create(asked)
        client.create(mx("plain", exit_code=None))
        written = client.checkpoint("asked")
        value = written.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
        stored = ns.job("MxJob", "asked")
        assert stored is not None
        assert stored["metadata"]["annotations"][ANNOTATION_CHECKPOINT_REQUEST] == value
        assert value.endswith("Z") and len(value) == len("2026-11-28T09:00:00.123456Z")
        assert stored["spec"]["runPolicy"] == {"checkpointTimeoutSeconds": 30}
        with pytest.raises(CheckpointRefused, match="checkpointTimeoutSeconds"):
            client.checkpoint("plain")
        assert ANNOTATION_CHECKPOINT_REQUEST not in (
            (ns.job("MxJob", "plain") or {})["metadata"].get("annotations") or {})


async def test_unreachable_cluster(tmp_path: Path, ns: Namespace) -> None:
    broken = yaml.safe_load(ns.plane.kubeconfig.read_text())
    broken["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(broken))
    async with AsyncClient(str(path), ns.name, request_timeout=5) as client:
        with pytest.raises(ClusterUnreachable):
            await client.list()
    async with AsyncClient(str(tmp_path / "missing"), ns.name) as client:
        with pytest.raises(ClusterUnreachable, match="no cluster configured"):
            await client.get("x")
