"""Which replica a job asks for a checkpoint before it is stopped (issue 38): declared by
the kind's plugin (`FrameworkPlugin.checkpoint_replica`, the hook
`trainjobs_checkpoint_replica`), never by the core."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.helpers import (
    PLUGINS,
    caffe2job,
    framework_of,
    job_doc,
    mxjob,
    parse,
    replica,
    template,
    tfjob,
)
from tests.unit.helpers import container as container_of
from trainjobs.api.models import Job
from trainjobs.plugin import Framework, FrameworkPlugin, Replica, ReplicaType
from trainjobs.plugin.manager import LoadedPlugin, load_plugins


def asked(doc: dict[str, Any]) -> Replica | None:
    job = parse(doc)
    return PLUGINS.checkpoint_replica(job, framework_of(job.kind))


@pytest.mark.parametrize(("counts", "expected"), [
    ({"Chief": 1, "Worker": 2, "PS": 1}, Replica("Chief", 0)),
    ({"Master": 1, "Worker": 2}, Replica("Master", 0)),
    ({"Worker": 3, "PS": 2}, Replica("Worker", 0)),
    ({"Chief": 0, "Worker": 2}, Replica("Worker", 0)),
    ({"Chief": 1}, Replica("Chief", 0)),
])
def test_tfjob_asks_the_chief_else_worker_0(counts: dict[str, int],
                                            expected: Replica) -> None:
    assert asked(tfjob(**counts)) == expected


def test_mxjob_asks_worker_0_and_caffe2job_shard_0() -> None:
    assert asked(mxjob()) == Replica("Worker", 0)
    assert asked(caffe2job(workers=3, type="redis", redisHost="r:6379")) == Replica("Worker", 0)


def test_a_kind_without_checkpoint_replica_is_asked_nothing() -> None:
    """A third-party kind written before plugin API 1.14 keeps its behaviour: no replica."""
    kind = Framework(kind="PlainJob", plural="plainjobs", short_names=(), name="plain",
                     replica_types=(ReplicaType("Worker", 1, None),),
                     container_name="plain", default_port=1234)

    class Plain(FrameworkPlugin):
        framework = kind

        def replica_env(self, job: Job, replica: Replica, ctx: object) -> None:
            return None

        def succeeded(self, job: Job, outcomes: object) -> bool:
            return False

    class Saver(Plain):
        def checkpoint_replica(self, job: Job) -> Replica | None:
            return Replica("Worker", 1)

    doc = job_doc("PlainJob", "p", {"Worker": replica(2, template(container_of("plain")))})
    for plugin, expected in ((Plain(), None), (Saver(), Replica("Worker", 1))):
        manager = load_plugins(extra=[(plugin, LoadedPlugin("plain", __name__, "tests", "0"))])
        job = parse(doc, manager)
        assert manager.checkpoint_replica(job, framework_of("PlainJob", manager)) == expected
