"""mxnet-operator's v1alpha1 MXJob: the list form.

`replicaSpecs` entries with `mxReplicaType` (SCHEDULER, SERVER, WORKER), `PsRootPort` on the
scheduler (the ps-lite port, DMLC_PS_ROOT_PORT), `replicas`; `jobMode: dist` (a job with a
scheduler and servers: what an MxJob is) or `local` (one process, nothing to distribute).
"""

from __future__ import annotations

from typing import Any

from trainjobs.convert.base import Conversion, job_document, set_port
from trainjobs.convert.legacy import list_replica_specs

__all__ = ["convert_mx_v1alpha1"]

TYPES = {"SCHEDULER": "Scheduler", "SERVER": "Server", "WORKER": "Worker"}
DEFAULT_PORT = 9091
PORT_NAME = "mxjob-port"


def convert_mx_v1alpha1(doc: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    raw = doc["spec"]
    field_name = "replicaSpecs" if "replicaSpecs" in raw else "replica_specs"
    mode = raw.get("jobMode")
    if mode == "local":
        conv.refuse("spec.jobMode", "local (a single process, no scheduler or servers) is not "
                    "a distributed job: run it as a Pod, or locally with `trainjobs run` of an "
                    "MxJob with one Scheduler, Server and Worker")
    elif mode not in (None, "dist"):
        conv.refuse("spec.jobMode", f"{mode!r} is neither dist nor local")
    elif mode == "dist":
        conv.changed("spec.jobMode", "dist is what an MxJob does; left out")
    replicas = list_replica_specs(raw.get(field_name), f"spec.{field_name}", "mxReplicaType",
                                  TYPES, None, frozenset({"PsRootPort"}), conv, _mx_replica)
    conv.changed("spec.runPolicy.cleanPodPolicy",
                 "not set: trainjobs' default, Running (pods still running when the job ends "
                 "are deleted; finished ones are kept for their logs)")
    for key in sorted(set(raw) - {field_name, "jobMode"}):
        conv.refuse(f"spec.{key}", "unknown v1alpha1 MXJob field; trainjobs has nothing like it")
    return job_document("MxJob", doc, {"replicaSpecs": replicas}, conv)


def _mx_replica(entry: dict[str, Any], path: str, rspec: dict[str, Any],
                conv: Conversion) -> None:
    if "PsRootPort" not in entry:
        return
    port = entry["PsRootPort"]
    if str(entry.get("mxReplicaType", "")).upper() != "SCHEDULER":
        conv.refuse(f"{path}.PsRootPort", "only the scheduler listens on the ps-lite port")
    elif port == DEFAULT_PORT:
        conv.changed(f"{path}.PsRootPort", f"{DEFAULT_PORT} is MxJob's default port; left out")
    else:
        set_port(rspec["template"], f"{path}.template", "mxnet", PORT_NAME, port,
                 f"{path}.PsRootPort", conv)
