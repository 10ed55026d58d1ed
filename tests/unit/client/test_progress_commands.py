"""`trainjobs list` and `trainjobs status` with status.progress: the PROGRESS and ETA columns
("-" for a job that does not report) and the status's progress section."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainjobs.api.models import Job, JobSpec, JobStatus, ObjectMeta, ProgressStatus, ReplicaSpec
from trainjobs.client import commands


def job(name: str, progress: ProgressStatus | None) -> Job:
    """Created 2 h ago, reported 12 s ago (from now: the commands read the real time)."""
    now = datetime.now(UTC)
    template = {"spec": {"containers": [{"name": "mxnet", "image": "x"}]}}
    return Job(kind="MxJob", metadata=ObjectMeta(name=name, namespace="ml",
                                                 creation_timestamp=now - timedelta(hours=2)),
               spec=JobSpec(replica_specs={"Worker": ReplicaSpec(replicas=2,
                                                                 template=template)}),
               status=JobStatus(state="Running", replica_summary="Worker 2/2",
                                progress=progress))


def reporting() -> Job:
    now = datetime.now(UTC)
    return job("mnist", ProgressStatus(
        step=1200, total_steps=5000, percent=24.0, eta_seconds=1900, summary="1200/5000 (24%)",
        metrics={"loss": 0.3121}, replica="mnist-worker-0",
        last_report_time=now - timedelta(seconds=12),
        last_progress_time=now - timedelta(seconds=75)))


class Client:
    """What the two commands read of `AsyncClient`."""

    namespace = "ml"

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs

    async def list(self, *args: Any, **kwargs: Any) -> list[Job]:
        return self.jobs

    async def get(self, name: str, namespace: str | None = None) -> Job:
        return next(j for j in self.jobs if j.name == name)

    async def pods(self, *args: Any) -> list[Any]:
        return []

    async def events(self, *args: Any) -> list[Any]:
        return []


async def test_list_shows_progress_and_eta_columns(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(kind=None, namespace="ml", selector=None, all_namespaces=False)
    assert await commands.COMMANDS["list"](Client([reporting(), job("resnet", None)]), args) == 0  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "STATE", "REPLICAS", "PROGRESS", "ETA", "AGE"]
    assert lines[1].split() == ["mnist", "MxJob", "Running", "Worker", "2/2", "1200/5000",
                                "(24%)", "31m40s", "2h"]
    assert lines[2].split() == ["resnet", "MxJob", "Running", "Worker", "2/2", "-", "-", "2h"]


async def test_status_shows_the_progress_section(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(job="mnist", namespace="ml")
    assert await commands.COMMANDS["status"](Client([reporting()]), args) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    section = out.split("progress:\n", 1)[1].split("replicas:", 1)[0].splitlines()
    assert section[0] == "  step 1200/5000 (24%), ETA 31m40s"
    assert section[1] in (
        f"  reported by mnist-worker-0, last report {s}s ago, step last advanced 1m{m}s ago"
        for s, m in (("12", "15"), ("13", "16")))  # (a second may pass meanwhile)
    assert section[2] == "  loss=0.3121"
    args = argparse.Namespace(job="resnet", namespace="ml")
    assert await commands.COMMANDS["status"](Client([job("resnet", None)]), args) == 0  # type: ignore[arg-type]
    assert "progress:" not in capsys.readouterr().out
