"""What the operator keeps per job between reconciles: the cached entry with its spec encoded,
and the validated model packed. Both must give back exactly what they were given."""

from __future__ import annotations

import copy
import sys
from typing import Any

from tests.unit.helpers import EXAMPLES, load_doc, parse
from trainjobs.api.models import MANAGED_BY_OPERATOR, Job
from trainjobs.operator.cache import PackedJob, reduce_job


def _api_object(doc: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    obj["metadata"].update(namespace="team-a", uid="u-1", generation=3, resourceVersion="42",
                           managedFields=[{"manager": "kubectl"}])
    obj["status"] = {"state": "Running"}
    return obj


def test_every_example_comes_back_from_its_entry() -> None:
    for path in EXAMPLES:
        obj = _api_object(load_doc(path))
        entry = reduce_job(obj)
        raw = entry.raw
        assert raw["spec"] == obj["spec"], path.name
        assert (raw["apiVersion"], raw["kind"], raw["status"]) == (
            obj["apiVersion"], obj["kind"], obj["status"])
        assert "managedFields" not in raw["metadata"]
        assert (entry.generation, entry.uid, entry.resource_version) == (3, "u-1", "42")
        assert entry.manager == MANAGED_BY_OPERATOR
        raw["spec"]["mutated"] = True  # a caller's change is its own
        assert "mutated" not in entry.raw["spec"]


def test_the_entry_names_another_manager_and_shares_repeated_strings() -> None:
    obj = _api_object(load_doc(EXAMPLES[0]))
    obj["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    obj["metadata"]["labels"] = {"team": "research"}
    entry = reduce_job(obj)
    assert entry.manager == "kueue.x-k8s.io/multikueue"
    other = reduce_job(_api_object(load_doc(EXAMPLES[0])) | {"metadata": {
        "name": "b", "namespace": "".join(["team", "-a"]), "labels": {"team": "research"}}})
    assert other.meta["namespace"] is entry.meta["namespace"]
    assert other.meta["labels"]["team"] is entry.meta["labels"]["team"]
    assert entry.meta["namespace"] is sys.intern("team-a")


def test_a_packed_job_unpacks_equal_of_its_own_class_and_fresh() -> None:
    for path in EXAMPLES:
        job = parse(load_doc(path))
        packed = PackedJob.pack(job)
        assert packed.model is None and len(packed.blob) < len(job.model_dump_json())
        first = packed.unpack()
        assert first == job and type(first.spec) is type(job.spec), path.name
        assert first is not packed.unpack()


def test_a_model_pickle_cannot_hold_is_kept_as_it_is() -> None:
    job = parse(load_doc(EXAMPLES[0]))

    class Local(type(job.spec)):  # type: ignore[misc]  # defined in a function: no pickle
        pass

    odd = Job.model_construct(**{**dict(job), "spec": Local.model_construct(**dict(job.spec))})
    packed = PackedJob.pack(odd)
    assert packed.model is odd and packed.unpack() is odd


def test_a_jobs_owned_objects_share_its_key_uid_and_replica_type() -> None:
    from tests.unit.helpers import render
    from trainjobs.operator.cache import reduce_owned

    job = parse(load_doc(EXAMPLES[0]))
    rendered = render(job)
    entries = []
    for kind, objs in (("Pod", rendered.pods), ("Service", rendered.services)):
        for obj in objs.values():
            obj = copy.deepcopy(obj)  # (each decoded separately, as from a watch)
            for ref in obj["metadata"]["ownerReferences"]:
                ref["uid"] = "".join(["job", "-uid"])
            entries.append(reduce_owned(obj, kind, {job.kind: "caffe2"}))
    assert len(entries) >= 2 and all(e is not None for e in entries)
    assert len({id(e.job) for e in entries if e}) == 1
    assert len({id(e.owner_uid) for e in entries if e}) == 1
    pods = [e.pod for e in entries if e and e.pod]
    by_type: dict[str, set[int]] = {}
    for pod in pods:
        by_type.setdefault(pod.replica_type_lower, set()).add(id(pod.replica_type_lower))
    assert pods and all(len(ids) == 1 for ids in by_type.values())
