"""`trainjobs run` at start: a missing redis-server says how to get it and exits 3 (not 1, a
failed job's code); the fields that only mean something on a cluster are listed once; the
summary's duration covers the whole run, start-up included."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import trainjobs.local.runner as runner
from tests.unit.helpers import Doc, caffe2job, container, replica, template
from trainjobs.cli import EXIT_PROGRAM_MISSING, main

PRINT = [sys.executable, "-c", "print('trained')"]


def _write(tmp_path: Path, doc: Doc) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(tmp_path: Path, doc: Doc) -> int:
    return main(["run", "--no-color", "--run-dir", str(tmp_path / "runs"),
                 str(_write(tmp_path, doc))])


def test_a_missing_redis_server_says_how_to_get_it_and_exits_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = caffe2job("shards", workers=2)  # redis backend, no redisHost: a managed Redis
    doc["spec"]["replicaSpecs"]["Worker"] = replica(2, template(container("caffe2",
                                                                          command=PRINT)))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no redis-server anywhere
    code = _run(tmp_path, doc)
    out, err = capsys.readouterr()
    assert code == EXIT_PROGRAM_MISSING == 3
    assert "'redis-server' is not on PATH" in err
    assert "make redis" in err and "apt-get install redis-server" in err
    assert "Traceback" not in err and "trained" not in out  # nothing was started


def test_fields_ignored_locally_are_listed_once(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    main_container = container("caffe2", command=PRINT,
                               resources={"limits": {"cpu": "1"}},
                               volumeMounts=[{"name": "data", "mountPath": "/data"}])
    sidecar = container("logger", command=["true"])
    doc = caffe2job("solo", workers=1)
    doc["spec"]["replicaSpecs"]["Worker"] = replica(1, template(
        main_container, sidecar, hostNetwork=True, nodeSelector={"gpu": "a100"},
        volumes=[{"name": "data", "emptyDir": {}}]))
    doc["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 60}
    assert _run(tmp_path, doc) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "ignored locally" in line]
    assert len(lines) == 1, out
    for field in ("hostNetwork (Worker)", "nodeSelector (Worker)", "resources (Worker)",
                  "volumeMounts (Worker)", "volumes (Worker)",
                  "containers other than the one run (sidecars) (Worker)",
                  "ttlSecondsAfterFinished (runPolicy)"):
        assert field in lines[0], lines[0]


def test_the_duration_covers_start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    real = runner.load_plugins

    def slow_start() -> Any:  # loading plugins, reading and rendering: part of the run
        time.sleep(1.0)
        return real()

    monkeypatch.setattr(runner, "load_plugins", slow_start)
    doc = caffe2job("solo", workers=1)
    doc["spec"]["replicaSpecs"]["Worker"] = replica(1, template(container("caffe2",
                                                                          command=PRINT)))
    assert _run(tmp_path, doc) == 0
    match = re.search(r"solo: Succeeded in ([0-9.]+)s", capsys.readouterr().out)
    assert match is not None
    assert float(match.group(1)) >= 1.0
