"""The jobs a benchmark creates, and the objects the ceiling creates in their place.

Why the ceiling's objects are rendered by the operator's own code: the ceiling then creates
exactly what the operator would (the same pods and Services, byte for byte but for a label),
so the two differ only by what the operator does beyond creating them.
"""

from __future__ import annotations

import json
from typing import Any

from trainjobs.testing import EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION

JOB_LABEL = "trainjobs.io/job-name"
#: The job-name label of Kubeflow's kinds (training-operator's, and the kubeflow plugin's).
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
# The ceiling's objects carry this label instead, so no operator informer selects them.
CEILING_JOB_LABEL = "bench.trainjobs.io/job-name"
KUBEFLOW_GROUP = "kubeflow.org"


def tfjob(name: str, namespace: str, *, workers: int, chief_run: str | None,
          worker_run: str | None, exit_code: int = 0) -> dict[str, Any]:
    """A TfJob: a Chief and `workers` Workers. A `*_run` duration makes KWOK end that pod
    with `exit_code` that long after it started; None: it runs until told otherwise."""

    def template(run: str | None) -> dict[str, Any]:
        annotations = {} if run is None else {EXIT_CODE_ANNOTATION: str(exit_code),
                                              RUN_DURATION_ANNOTATION: run}
        return {
            "metadata": {"annotations": annotations} if annotations else {},
            "spec": {"containers": [{
                "name": "tensorflow",
                "image": "example.invalid/bench-trainer:1",
                "command": ["python", "-u", "train.py"],
            }]},
        }

    specs: dict[str, Any] = {"Chief": {"replicas": 1, "template": template(chief_run)}}
    if workers:
        specs["Worker"] = {"replicas": workers, "template": template(worker_run)}
    return {
        "apiVersion": "trainjobs.io/v1alpha1",
        "kind": "TfJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicaSpecs": specs},
    }


def tfjob_path(namespace: str, name: str = "", group: str = "trainjobs.io") -> str:
    tail = f"/{name}" if name else ""
    version = "v1" if group == KUBEFLOW_GROUP else "v1alpha1"
    return f"/apis/{group}/{version}/namespaces/{namespace}/tfjobs{tail}"


def kubeflow_tfjob(name: str, namespace: str, *, workers: int, chief_run: str | None,
                   worker_run: str | None) -> dict[str, Any]:
    """The same job as :func:`tfjob` as Kubeflow writes it: a ``kubeflow.org/v1`` TFJob
    (``tfReplicaSpecs``), which training-operator and the operator's kubeflow plugin both
    serve."""
    job = tfjob(name, namespace, workers=workers, chief_run=chief_run, worker_run=worker_run)
    return {"apiVersion": f"{KUBEFLOW_GROUP}/v1", "kind": "TFJob", "metadata": job["metadata"],
            "spec": {"tfReplicaSpecs": job["spec"]["replicaSpecs"]}}


def rendered_objects(job: dict[str, Any], owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The Services and pods the operator would create for `job` (rendered by the same code),
    relabelled for the ceiling: `CEILING_JOB_LABEL` instead of the job-name label, owned by
    `owner` (an object that exists, so the garbage collector leaves them alone), and without
    the annotations that make KWOK end a pod."""
    from trainjobs.core.render import render_job
    from trainjobs.core.validation import parse_job
    from trainjobs.plugin.manager import load_plugins

    enable = ["kubeflow"] if job["apiVersion"].startswith(f"{KUBEFLOW_GROUP}/") else []
    plugins = _plugins_cache.get(",".join(enable))
    if plugins is None:
        plugins = _plugins_cache[",".join(enable)] = load_plugins(enable=enable)
    parsed = parse_job(job, plugins, job["metadata"]["name"])
    framework = plugins.framework_for(parsed.kind)
    assert framework is not None
    rendered = render_job(parsed, framework, plugins, backend="kubernetes")
    out = []
    for obj in [*rendered.services.values(), *rendered.pods.values()]:
        obj = json.loads(json.dumps(obj))
        meta = obj["metadata"]
        meta["labels"] = _relabel(meta.get("labels", {}))
        meta["ownerReferences"] = [owner]
        # Ceiling pods run until deleted: KWOK ending them would still be busy with that
        # when the next phase starts.
        for ann in (EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION):
            meta.get("annotations", {}).pop(ann, None)
        if obj["kind"] == "Service":
            obj["spec"]["selector"] = _relabel(obj["spec"]["selector"])
        out.append(obj)
    return out


_plugins_cache: dict[str, Any] = {}


def _relabel(labels: dict[str, str]) -> dict[str, str]:
    return {(CEILING_JOB_LABEL if k in (JOB_LABEL, KUBEFLOW_JOB_LABEL) else k): v
            for k, v in labels.items()}

