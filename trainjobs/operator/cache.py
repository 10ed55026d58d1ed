"""The operator's view of the cluster: jobs, and the pods and Services they own, by job.

Why reduced entries and an owner index: a reconcile must find a job's pods without a LIST and
without scanning 20,000 pods, and memory must stay proportional to what the planner needs.
Pods are indexed by their controlling job (`Kind/namespace/name`, from the controller
ownerReference), so a reconcile reads exactly its own objects.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from trainjobs.api.models import GROUP, Job, job_manager
from trainjobs.core.observed import ObservedPod, from_pod
from trainjobs.core.render import RenderedJob
from trainjobs.labels import LABEL_FRAMEWORK, LABEL_REPLICA_INDEX
from trainjobs.plugin.types import Replica

__all__ = ["JobEntry", "OwnedEntry", "OwnerIndex", "PackedJob", "PackedRender", "job_key",
           "owner_of", "reduce_job"]


def job_key(kind: str, namespace: str, name: str) -> str:
    """A job's key (interned: every cached object the job owns holds it)."""
    return sys.intern(f"{kind}/{namespace}/{name}")


@dataclass(frozen=True, slots=True)
class JobEntry:
    """A job as cached: the parts of its object that reconcile reads.

    Why the spec is kept encoded: it is read only when a new generation is validated (and the
    validated model is kept meanwhile), but as decoded JSON it was most of a job's cached
    bytes (5.7 KiB of a TfJob's; encoded, the whole entry is about 2 KiB: python -m
    bench.memory), and 5,000 jobs stay cached long after they finish. Who manages the job
    (`spec.managedBy`), which every reconcile asks first, is read once here.
    """

    kind: str
    api_version: str
    meta: dict[str, Any]
    status: dict[str, Any]
    spec_json: bytes
    manager: str

    @property
    def generation(self) -> int:
        return int(self.meta.get("generation") or 0)

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid", ""))

    @property
    def resource_version(self) -> str:
        return str(self.meta.get("resourceVersion", ""))

    @property
    def spec(self) -> Any:
        """The spec, decoded afresh (a caller may change it)."""
        return orjson.loads(self.spec_json)

    @property
    def raw(self) -> dict[str, Any]:
        """The job as an object (spec decoded afresh), what `parse_job` validates."""
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": self.meta,
                "spec": self.spec, "status": self.status}


#: The metadata a job's entry keeps.
_JOB_META = ("name", "namespace", "uid", "generation", "resourceVersion", "creationTimestamp",
             "deletionTimestamp", "labels", "annotations")


def reduce_job(obj: dict[str, Any]) -> JobEntry:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    return JobEntry(sys.intern(str(obj.get("kind") or "")),
                    sys.intern(str(obj.get("apiVersion") or "")),
                    {k: _interned(k, meta[k]) for k in _JOB_META if k in meta},
                    obj.get("status") or {}, _exact(orjson.dumps(spec)), job_manager(spec))


def _exact(data: bytes) -> bytes:
    """A copy of exactly `data`'s size: orjson's own bytes object keeps the 4 KiB buffer it
    encoded into (python -m bench.memory: a TfJob's 543-byte spec held 4,097 bytes)."""
    return bytes(memoryview(data))


def _interned(key: str, value: Any) -> Any:
    """Repeated metadata strings (the namespace, label keys and values) shared between the
    entries that hold them."""
    if key == "namespace" and isinstance(value, str):
        return sys.intern(value)
    if key == "labels" and isinstance(value, dict):
        return {sys.intern(str(k)): sys.intern(v) if isinstance(v, str) else v
                for k, v in value.items()}
    return value


JOB_GROUPS = frozenset({GROUP})


def owner_of(obj: dict[str, Any], groups: frozenset[str] = JOB_GROUPS
             ) -> tuple[str, str] | None:
    """(job key, job uid) of the job controlling `obj`, if any: a job of one of `groups` (the
    groups of the installed kinds; a compatibility plugin serves kubeflow.org's)."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict):
            continue
        if ref.get("controller") and str(ref.get("apiVersion", "")).split("/")[0] in groups:
            kind, name, uid = ref.get("kind"), ref.get("name"), ref.get("uid")
            if kind and name and uid:
                return job_key(str(kind), str(meta.get("namespace", "")), str(name)), str(uid)
    return None


@dataclass(frozen=True, slots=True)
class OwnedEntry:
    """A pod or Service owned by a job. `pod` is set for replica pods only; `obj` for objects
    of a kind a plugin watches (apiVersion, kind, metadata name, spec, status), for its
    `trainjobs_object_status`."""

    job: str
    owner_uid: str
    kind: str
    name: str
    replica: bool
    pod: ObservedPod | None = None
    obj: dict[str, Any] | None = None


def reduce_owned(obj: dict[str, Any], kind: str,
                 container_by_framework: dict[str, str], *,
                 keep: bool = False, groups: frozenset[str] = JOB_GROUPS
                 ) -> OwnedEntry | None:
    """The cached entry of an owned object; `keep` keeps its spec and status (a watched
    plugin kind, e.g. a PodGroup: small, and its status is reported on the job)."""
    owner = owner_of(obj, groups)
    if owner is None:
        return None
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    replica = LABEL_REPLICA_INDEX in labels
    pod = None
    if kind == "Pod" and replica:
        container = container_by_framework.get(labels.get(LABEL_FRAMEWORK, ""), "")
        pod = from_pod(obj, container)
    kept = None
    if keep:
        kept = {"apiVersion": obj.get("apiVersion"), "kind": kind,
                "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace")},
                "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}
    # The owner's uid is the same string for each of the job's objects: shared, not copied.
    return OwnedEntry(owner[0], sys.intern(owner[1]), kind, str(meta.get("name", "")), replica,
                      pod, kept)


class OwnerIndex:
    """Which cached objects belong to which job."""

    def __init__(self) -> None:
        self._by_job: dict[str, dict[str, OwnedEntry]] = defaultdict(dict)

    def put(self, entry: OwnedEntry) -> None:
        self._by_job[entry.job][f"{entry.kind}/{entry.name}"] = entry

    def remove(self, entry: OwnedEntry) -> None:
        owned = self._by_job.get(entry.job)
        if owned is not None:
            owned.pop(f"{entry.kind}/{entry.name}", None)
            if not owned:
                del self._by_job[entry.job]

    def of(self, job: str) -> list[OwnedEntry]:
        return list(self._by_job.get(job, {}).values())

    def get(self, job: str, ref: str) -> OwnedEntry | None:
        """The cached object `ref` (`Kind/name`) of `job`, if the cache holds it."""
        owned = self._by_job.get(job)
        return None if owned is None else owned.get(ref)


@dataclass(frozen=True, slots=True)
class PackedJob:
    """An active job's validated model, kept between reconciles as a compressed pickle.

    Why: validation is costly, so the model is kept per generation; but as objects a TfJob's
    model held 8 KiB, the largest part of an active job's memory once the spec was kept
    encoded (5,000 active jobs: 40 MB), and about 0.9 KiB packed (python -m bench.memory).
    `unpack` costs about 50 us, once per reconcile, like `PackedRender`'s. Pickle keeps each
    plugin's own spec class; a model pickle cannot hold (a class defined in a function) is
    kept as it is.
    """

    blob: bytes
    model: Job | None = None  # set only when it could not be packed

    @classmethod
    def pack(cls, job: Job) -> PackedJob:
        try:
            return cls(zlib.compress(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL), 1))
        except (pickle.PicklingError, TypeError, AttributeError):
            return cls(b"", job)

    def unpack(self) -> Job:
        """The model; a fresh one each time unless it could not be packed."""
        if self.model is not None:
            return self.model
        job: Job = pickle.loads(zlib.decompress(self.blob))
        return job


#: Replicas per compressed chunk of a PackedRender: a small job is one chunk, as before; a
#: large one is decoded only a chunk at a time, and only where a reconcile reads it.
CHUNK_REPLICAS = 16


def _pack(value: Any) -> bytes:
    """orjson, as on the watch path: a 2,000-replica TfJob's pods are 160 MB of JSON (each
    TF_CONFIG lists every peer); rendering and packing them took 0.83 CPU-s with json, 0.50
    with orjson, 0.3 s of either zlib's (docs/benchmarks.md, "One large job beside small
    ones"). What orjson refuses (an integer over 64 bits) json still encodes."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        data = json.dumps(value, separators=(",", ":")).encode()
    return zlib.compress(data, 1)


class _Packer:
    """Builds a PackedRender chunk by chunk."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.names: dict[str, Replica] = {}
        self.chunk_of: dict[str, int] = {}
        self.pods: dict[str, Any] = {}
        self.services: dict[str, Any] = {}

    def add(self, name: str, replica: Replica, pod: dict[str, Any],
            service: dict[str, Any]) -> bool:
        """Adds one replica; whether a chunk was packed."""
        self.names[name], self.chunk_of[name] = replica, len(self.chunks)
        self.pods[name], self.services[name] = pod, service
        if len(self.pods) < CHUNK_REPLICAS:
            return False
        self._flush()
        return True

    def _flush(self) -> None:
        self.chunks.append(_pack({"pods": self.pods, "services": self.services}))
        self.pods, self.services = {}, {}

    def packed(self, extras: list[dict[str, Any]]) -> PackedRender:
        if self.pods:
            self._flush()
        return PackedRender(tuple(self.chunks), self.names, self.chunk_of, _pack(extras))


def _unpack(blob: bytes) -> Any:
    data = zlib.decompress(blob)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # (what only json could encode)
        return json.loads(data)


@dataclass(frozen=True, slots=True)
class PackedRender:
    """An active job's rendered objects, kept between reconciles as zlib-compressed JSON.

    Why: as dicts, a 4-replica job's pod and Service manifests take about 18 KiB; packed,
    under 1 KiB. When thousands of jobs start at once those manifests were most of the
    operator's peak memory (docs/benchmarks.md, "Scale"). Replicas are packed in chunks of
    CHUNK_REPLICAS, and `unpack` decodes a chunk only when a reconcile reads an object of it
    (a pod to create): a reconcile of a running 2,000-replica MxJob reads names only, instead
    of decoding ~160 MB of manifests every time. Each `unpack` hands out fresh dicts.
    """

    chunks: tuple[bytes, ...]
    replicas: dict[str, Replica]
    chunk_of: dict[str, int]
    extras: bytes

    @classmethod
    def pack(cls, rendered: RenderedJob) -> PackedRender:
        return cls.of(((name, rendered.replicas[name], rendered.pods[name],
                        rendered.services[name]) for name in rendered.pods), rendered.extras)

    @classmethod
    def of(cls, replicas: Iterable[tuple[str, Replica, dict[str, Any], dict[str, Any]]],
           extras: list[dict[str, Any]]) -> PackedRender:
        """Packs (name, replica, pod, Service) as they come: from `Rendering.replicas()`, no
        more than one chunk of them is ever held as dicts."""
        packer = _Packer()
        for item in replicas:
            packer.add(*item)
        return packer.packed(extras)

    @classmethod
    async def of_sliced(cls, replicas: Iterable[tuple[str, Replica, dict[str, Any],
                                                      dict[str, Any]]],
                        extras: list[dict[str, Any]]) -> PackedRender:
        """`of`, on the event loop a chunk at a time (a few milliseconds each), yielding to
        the loop between chunks.

        Why not a worker thread: a thread holding the GIL for the half second a 2,000-replica
        job takes makes the loop wait for the GIL after each of its socket calls (the convoy
        effect), which stalled every other job by 100-200 ms (bench.bigjob)."""
        packer = _Packer()
        for item in replicas:
            if packer.add(*item):
                await asyncio.sleep(0)
        return packer.packed(extras)

    @property
    def size(self) -> int:
        """Bytes held compressed."""
        return sum(map(len, self.chunks)) + len(self.extras)

    def unpack(self) -> RenderedJob:
        chunks = _Chunks(self.chunks)
        return RenderedJob(_Lazy(chunks, self.chunk_of, "pods"),
                           _Lazy(chunks, self.chunk_of, "services"),
                           _unpack(self.extras), dict(self.replicas))


class _Chunks:
    """The chunks of one unpacked rendering, each decoded once, on first read."""

    def __init__(self, blobs: tuple[bytes, ...]) -> None:
        self._blobs = blobs
        self._decoded: dict[int, dict[str, dict[str, Any]]] = {}

    def get(self, index: int) -> dict[str, dict[str, Any]]:
        chunk = self._decoded.get(index)
        if chunk is None:
            decoded: dict[str, dict[str, Any]] = _unpack(self._blobs[index])
            chunk = self._decoded[index] = decoded
        return chunk


class _Lazy(Mapping[str, dict[str, Any]]):
    """The pods (or Services) of an unpacked rendering by name; names cost nothing, an object
    is decoded (with its chunk) when it is read."""

    def __init__(self, chunks: _Chunks, chunk_of: dict[str, int], kind: str) -> None:
        self._chunks = chunks
        self._chunk_of = chunk_of
        self._kind = kind

    def __getitem__(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self._chunks.get(self._chunk_of[name])[self._kind][name]
        return obj

    def __iter__(self) -> Iterator[str]:
        return iter(self._chunk_of)

    def __len__(self) -> int:
        return len(self._chunk_of)

    def __contains__(self, name: object) -> bool:
        return name in self._chunk_of
