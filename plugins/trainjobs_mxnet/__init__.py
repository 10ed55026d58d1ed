"""The MxJob kind: MXNet's parameter-server training (ps-lite) with a scheduler, servers, workers.

Environment contract (docs/api.md, "Environment contracts"), set in every container of every
replica: DMLC_ROLE, DMLC_PS_ROOT_URI/PORT (the scheduler), DMLC_NUM_SERVER, DMLC_NUM_WORKER,
DMLC_USE_KUBERNETES=1 on Kubernetes, DMLC_WORKER_ID for workers, and MX_CONFIG (the cluster as
JSON). The job succeeds when every worker has succeeded; scheduler and servers never exit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from trainjobs.plugin import (
    Framework,
    FrameworkPlugin,
    Job,
    JobSpec,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
    ReplicaType,
)

__all__ = ["MXNET", "MxJobSpec", "MxNetPlugin", "plugin"]


class MxJobSpec(JobSpec):
    """MxJob has no fields beyond the common ones."""


MXNET = Framework(
    kind="MxJob",
    plural="mxjobs",
    short_names=("mxj",),
    name="mxnet",
    replica_types=(
        ReplicaType("Scheduler", 1, 1, description="ps-lite scheduler: exactly one."),
        # ps-lite's servers and workers bind a port of their own and tell the scheduler: only
        # the scheduler listens on the framework port (DMLC_PS_ROOT_PORT).
        ReplicaType("Server", 1, None, listens=False,
                    description="Parameter servers: one or more."),
        ReplicaType("Worker", 1, None, listens=False, elastic=True,
                    description="Workers: one or more; all must succeed."),
    ),
    container_name="mxnet",
    default_port=9091,
    spec_model=MxJobSpec,
    env_in_all_containers=True,
    description="A distributed MXNet job: one Scheduler, Servers and Workers (ps-lite).",
)


class MxNetPlugin(FrameworkPlugin):
    framework = MXNET

    def checkpoint_replica(self, job: Job) -> Replica | None:
        """Worker 0: in dist_sync every worker holds the same parameters after a step."""
        for key in job.spec.replica_specs:
            rtype = self.framework.replica_type(key)
            if rtype is not None and rtype.name == "Worker":
                return Replica(key, 0)
        return None

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv:
        layout = ctx.cluster
        keys = {MXNET.replica_type(k).name: k  # type: ignore[union-attr]
                for k in job.spec.replica_specs}
        scheduler = layout.of_type(keys["Scheduler"])[0]
        servers = layout.of_type(keys["Server"])
        workers = layout.of_type(keys["Worker"])
        role = replica.type_lower
        values = {
            "DMLC_ROLE": role,
            "DMLC_PS_ROOT_URI": scheduler.host,
            "DMLC_PS_ROOT_PORT": str(scheduler.port),
            "DMLC_NUM_SERVER": str(len(servers)),
            "DMLC_NUM_WORKER": str(len(workers)),
        }
        if ctx.backend == "kubernetes":
            values["DMLC_USE_KUBERNETES"] = "1"
        else:
            # ps-lite advertises the address of its first interface unless told; on one
            # machine every replica must advertise loopback (not part of the cluster contract).
            values["DMLC_NODE_HOST"] = "127.0.0.1"
        if role == "worker":
            values["DMLC_WORKER_ID"] = str(replica.index)
        # The cluster, the same for every replica, is serialised once per rendering and
        # spliced in (byte for byte what json.dumps of the whole object writes).
        cluster = layout.shared("MX_CONFIG.cluster", lambda: json.dumps({
            t: [{"url": a.host, "port": a.port} for a in addrs]
            for t, addrs in (("scheduler", [scheduler]), ("server", servers),
                             ("worker", workers))
        }, separators=(",", ":")))
        # MXNet's tuning roles read labels; plain training leaves them empty.
        labels = '{"scheduler":"","server":"","worker":""}'
        task = json.dumps({"type": role, "index": replica.index}, separators=(",", ":"))
        values["MX_CONFIG"] = f'{{"cluster":{cluster},"labels":{labels},"task":{task}}}'

        return ReplicaEnv(values, all_containers=True)

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        workers = [o for o in outcomes if o.replica.type == "Worker"]
        return bool(workers) and all(o.phase is ReplicaPhase.SUCCEEDED for o in workers)


plugin = MxNetPlugin()
