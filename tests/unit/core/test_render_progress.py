"""Progress on a cluster in the rendered pods (core/render.py, core/progress_pod.py): with an
endpoint, every container of every replica of every kind gets the progress environment, the
token file and the CA, and the pod one projected token volume of our audience; without one,
nothing at all changes; a template's own volume or mount of the same name is refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.unit.helpers import (
    PLUGINS,
    caffe2job,
    container,
    framework_of,
    mxjob,
    parse,
    replica,
    template,
    tfjob,
)
from trainjobs.core.progress import ProgressEndpoint
from trainjobs.core.progress_pod import AUDIENCE, TOKEN_DIR, TOKEN_FILE, VOLUME
from trainjobs.core.render import render_job
from trainjobs.core.validation import parse_job
from trainjobs.errors import SpecInvalid

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
ENDPOINT = ProgressEndpoint("https://trainjobs-progress.ops.svc:8443/v1/progress", 5.0,
                            AUDIENCE, TOKEN_FILE, CA)


def with_sidecar(doc: dict[str, Any]) -> dict[str, Any]:
    """Every replica type also runs a second container the kind knows nothing of."""
    for spec in doc["spec"]["replicaSpecs"].values():
        spec["template"]["spec"]["containers"].append(container("sidecar"))
    return doc


JOBS = [with_sidecar(mxjob(server=1, worker=2)), with_sidecar(caffe2job(workers=2)),
        with_sidecar(tfjob(Chief=1, PS=1, Worker=2))]


def rendered(doc: dict[str, Any], progress: ProgressEndpoint | None) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["metadata"]["uid"] = "uid-1"
    job = parse(doc)
    return render_job(job, framework_of(job.kind), PLUGINS, progress=progress).pods


@pytest.mark.parametrize("doc", JOBS, ids=lambda d: d["kind"])
def test_every_container_of_every_replica_gets_the_env_and_the_token(
        doc: dict[str, Any]) -> None:
    pods = rendered(doc, ENDPOINT)
    assert len(pods) >= 2
    for name, pod in pods.items():
        volumes = [v for v in pod["spec"]["volumes"] if v["name"] == VOLUME]
        assert volumes == [{"name": VOLUME, "projected": {"defaultMode": 0o444, "sources": [
            {"serviceAccountToken": {"audience": AUDIENCE, "expirationSeconds": 3600,
                                     "path": "token"}}]}}]
        assert len(pod["spec"]["containers"]) >= 2
        for c in pod["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["TRAINJOBS_PROGRESS_URL"] == ENDPOINT.url
            assert env["TRAINJOBS_PROGRESS_INTERVAL"] == "5"
            assert env["TRAINJOBS_PROGRESS_TOKEN_FILE"] == TOKEN_FILE
            assert env["TRAINJOBS_PROGRESS_CA"] == CA
            assert env["TRAINJOBS_JOB_UID"] == "uid-1"
            assert env["TRAINJOBS_REPLICA_NAME"] == name
            assert {"name": VOLUME, "mountPath": TOKEN_DIR, "readOnly": True} in \
                c["volumeMounts"]


@pytest.mark.parametrize("doc", JOBS, ids=lambda d: d["kind"])
def test_without_an_endpoint_pods_are_exactly_as_before(doc: dict[str, Any]) -> None:
    """Enabling adds the env entries, the volume and the mounts, and nothing else: take them
    away and the pod is byte for byte the pod rendered without an endpoint."""
    plain, enabled = rendered(doc, None), rendered(doc, ENDPOINT)
    text = json.dumps(plain, sort_keys=True)
    assert "TRAINJOBS_PROGRESS" not in text and VOLUME not in text
    stripped = copy.deepcopy(enabled)
    for pod in stripped.values():
        spec = pod["spec"]
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != VOLUME]
        if not spec["volumes"]:
            del spec["volumes"]
        for c in spec["containers"]:
            c["env"] = [e for e in c["env"] if not e["name"].startswith(
                ("TRAINJOBS_PROGRESS", "TRAINJOBS_JOB_", "TRAINJOBS_REPLICA_",
                 "TRAINJOBS_ATTEMPT"))]
            if not c["env"]:
                del c["env"]
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != VOLUME]
            if not c["volumeMounts"]:
                del c["volumeMounts"]
    assert json.dumps(stripped, sort_keys=True) == text


def test_the_local_backend_gets_no_token_and_no_volume() -> None:
    job = parse(caffe2job(workers=1))
    pods = render_job(job, framework_of(job.kind), PLUGINS, backend="local",
                      progress=ProgressEndpoint("http://127.0.0.1:1/v1/progress")).pods
    for pod in pods.values():
        assert "volumes" not in pod["spec"]
        env = {e["name"] for c in pod["spec"]["containers"] for e in c["env"]}
        assert "TRAINJOBS_PROGRESS_URL" in env and "TRAINJOBS_PROGRESS_TOKEN_FILE" not in env


def test_a_template_volume_or_mount_in_the_way_is_refused_not_overwritten() -> None:
    tmpl = template(container("caffe2", volumeMounts=[{"name": "x", "mountPath": TOKEN_DIR}]),
                    volumes=[{"name": VOLUME, "emptyDir": {}}])
    doc = caffe2job(workers=1)
    doc["spec"]["replicaSpecs"]["Worker"] = replica(1, tmpl)
    with pytest.raises(SpecInvalid, match="reserved for trainjobs' progress token"):
        rendered(doc, ENDPOINT)
    tmpl["spec"]["volumes"] = []
    with pytest.raises(SpecInvalid, match="where trainjobs mounts the progress token"):
        rendered(doc, ENDPOINT)


def test_validation_with_the_operators_endpoint_refuses_the_reserved_volume() -> None:
    """The operator validates with its endpoint (parse_job's `progress`), so such a job fails
    InvalidSpec up front, as a colliding variable does; without one it is a valid job."""
    doc = caffe2job(workers=1)
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
        {"name": VOLUME, "emptyDir": {}}]
    parse_job(copy.deepcopy(doc), PLUGINS)
    with pytest.raises(SpecInvalid, match="reserved for trainjobs' progress token"):
        parse_job(copy.deepcopy(doc), PLUGINS, progress=ENDPOINT)
