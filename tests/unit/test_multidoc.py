"""`trainjobs render` and `trainjobs run` read the files users `kubectl apply`: a job kept with
its ConfigMaps, Services and PVCs. The jobs are taken, the other objects named as ignored."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from trainjobs.cli import main
from trainjobs.yamlio import describe, load_documents

from .helpers import Doc, caffe2job, container, mxjob, replica, template

CONFIGMAP: Doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                  "data": {"lr": "0.1"}}
SERVICE: Doc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "redis-service"},
                "spec": {"ports": [{"port": 6379}]}}
PVC: Doc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteMany"],
                     "resources": {"requests": {"storage": "1Gi"}}}}


def _file(tmp_path: Path, *docs: Doc) -> Path:
    path = tmp_path / "bundle.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def test_render_takes_the_jobs_and_names_the_other_objects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, CONFIGMAP, mxjob("first"), SERVICE, caffe2job("second"), PVC)
    assert main(["render", str(path)]) == 0
    out, err = capsys.readouterr()
    jobs = {d["metadata"]["labels"]["trainjobs.io/job-name"] for d in yaml.safe_load_all(out)}
    assert jobs == {"first", "second"}
    assert err.strip() == ("note: ignoring 3 objects that are not a job: ConfigMap/settings, "
                           "Service/redis-service, PersistentVolumeClaim/data "
                           "(kubectl apply creates those)")


def test_a_file_without_a_job_is_refused_naming_what_it_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, CONFIGMAP, PVC)
    assert main(["render", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no job found: the file holds only ConfigMap/settings, PersistentVolumeClaim/data" \
        in err


def test_an_invalid_job_among_objects_names_its_document(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = mxjob("bad")
    bad["spec"]["replicaSpecs"]["Worker"]["replicas"] = -1
    path = _file(tmp_path, CONFIGMAP, bad)
    assert main(["render", str(path)]) == 2
    err = capsys.readouterr().err
    assert "document 2 (MxJob/bad): spec.replicaSpecs.Worker.replicas" in err


def test_a_trainjobs_kind_that_is_not_installed_is_an_error_not_ignored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, {**mxjob(), "kind": "PyTorchJob"}, CONFIGMAP)
    assert main(["render", str(path)]) == 2
    assert "unknown kind 'PyTorchJob'" in capsys.readouterr().err


def test_a_list_stands_for_its_items() -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [CONFIGMAP, PVC]})
    assert [describe(d) for d in load_documents(text)] == ["ConfigMap/settings",
                                                           "PersistentVolumeClaim/data"]


def test_run_takes_the_one_job_and_lists_the_rest_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = caffe2job("solo", workers=1)
    job["spec"]["replicaSpecs"]["Worker"] = replica(1, template(
        container("caffe2", command=[sys.executable, "-c", "print('trained')"])))
    path = _file(tmp_path, SERVICE, job, CONFIGMAP)
    assert main(["run", "--no-color", "--run-dir", str(tmp_path / "runs"), str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("note: ignoring 2 objects that are not a job: Service/redis-service, "
                     "ConfigMap/settings") == 1
    assert "trained" in out


def test_run_refuses_two_jobs_naming_them(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, mxjob("one"), CONFIGMAP, mxjob("two"))
    assert main(["run", "--run-dir", str(tmp_path / "runs"), str(path)]) == 2
    assert "expected one job, found 2: MxJob/one, MxJob/two" in capsys.readouterr().err
