"""A small in-memory stand-in for the `Kube` calls the controller makes, for its unit tests.

Why a fake here and a real API server elsewhere: the controller's own decisions (when a status
is written, what the create gate holds, what expectations add, what is forgotten) are tested
in milliseconds with a fake clock; what the API server does with the calls is the integration
tests' (tests/integration/test_operator_*.py). The fake keeps objects by (plural, namespace,
name), gives them uids and resourceVersions, answers with the typed errors of
trainjobs/kube/errors.py, and feeds the controller's real informers through list and watch.
Nothing is delivered to a watch until the test calls `deliver()`: a test decides what the
caches have seen.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from trainjobs.kube import ApiConflict, ApiError, ApiNotFound, Resource, api_error
from trainjobs.kube.selector import parse_selector
from trainjobs.operator.gates.kueue import WORKLOADS

Obj = dict[str, Any]


def merge_patch(target: Obj, patch: Obj) -> Obj:
    """`target` with the JSON merge patch `patch` applied (RFC 7386), as the API server does:
    objects merge key by key, null removes a key, anything else replaces."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value) if not isinstance(value, dict) else \
                merge_patch({}, value)
    return merged


@dataclass
class Call:
    verb: str
    kind: str
    namespace: str
    name: str
    body: Obj | None = None


def status_error(status: int, reason: str, message: str) -> ApiError:
    """The typed error of an API server answer with this Status."""
    return api_error(status, reason, json.dumps({"kind": "Status", "reason": reason,
                                                 "message": message}))


@dataclass
class _Watch:
    resource: Resource
    namespace: str | None
    selector: str
    events: asyncio.Queue[Obj] = field(default_factory=asyncio.Queue)


class FakeKube:
    """The API server as the controller sees it: objects, typed errors, list and watch."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[Call] = []
        # verb, kind, body -> an error to raise instead of doing the call (None: do it).
        self.refuse: Callable[[str, str, Obj | None], ApiError | None] = lambda *_: None
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self._watches: list[_Watch] = []
        self._undelivered: list[tuple[str, Resource, Obj]] = []

    # The calls the controller makes ------------------------------------------------------

    async def create(self, resource: Resource, namespace: str, body: Obj) -> None:
        name = body["metadata"]["name"]
        self._call("POST", resource, namespace, name, body)
        key = (resource.plural, namespace, name)
        if key in self.objects:
            raise status_error(409, "AlreadyExists", f"{resource.plural} {name!r} already "
                               "exists")
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        meta.update(namespace=namespace, uid=f"uid-{next(self._uid)}",
                    resourceVersion=str(next(self._rv)))
        self.objects[key] = obj
        self._changed("ADDED", resource, obj)

    async def delete(self, resource: Resource, namespace: str, name: str,
                     propagation: str = "Background") -> None:
        self._call("DELETE", resource, namespace, name)
        obj = self.objects.pop((resource.plural, namespace, name), None)
        if obj is None:
            raise status_error(404, "NotFound", f"{resource.plural} {name!r} not found")
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._changed("DELETED", resource, obj)

    async def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        self._call("GET", resource, namespace, name)
        obj = self.objects.get((resource.plural, namespace, name))
        if obj is None:
            raise status_error(404, "NotFound", f"{resource.plural} {name!r} not found")
        return copy.deepcopy(obj)

    async def merge_patch_status(self, resource: Resource, namespace: str, name: str,
                                 status: Obj) -> Obj:
        self._call("PATCH", resource, namespace, name, {"status": status})
        obj = self.objects.get((resource.plural, namespace, name))
        if obj is None:
            raise status_error(404, "NotFound", f"{resource.plural} {name!r} not found")
        obj["status"] = merge_patch(obj.get("status") or {}, status)
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._changed("MODIFIED", resource, obj)
        return copy.deepcopy(obj)

    async def request(self, verb: str, url: str, body: Any = None, *,
                      query: list[tuple[str, Any]] | None = None,
                      content_type: str = "application/json",
                      timeout: float | None = None) -> Obj:
        """The generic call, for the PATCHes of Kueue's Workloads: a server-side apply of
        status conditions (merged by type) or a merge patch of the status subresource."""
        parts = url.strip("/").split("/")
        if verb != "PATCH" or "namespaces" not in parts:
            raise NotImplementedError(f"FakeKube.request {verb} {url}")
        i = parts.index("namespaces")
        namespace, plural, name = parts[i + 1], parts[i + 2], parts[i + 3]
        sub = parts[i + 4] if len(parts) > i + 4 else ""
        if plural != WORKLOADS.plural:
            raise NotImplementedError(f"FakeKube.request on {plural}")
        resource = WORKLOADS
        self._call(verb, resource, namespace, name, body)
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            raise status_error(404, "NotFound", f"{plural} {name!r} not found")
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            raise status_error(409, "Conflict", "the object has been modified")
        if content_type == "application/apply-patch+yaml":
            status = obj.setdefault("status", {})
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            conditions.update({c["type"]: c for c in body["status"]["conditions"]})
            status["conditions"] = list(conditions.values())
        elif sub == "status":
            obj["status"] = {**(obj.get("status") or {}), **body.get("status", {})}
        else:
            obj["metadata"].update({key: v for key, v in body.get("metadata", {}).items()
                                    if key != "resourceVersion"})
            obj["spec"] = {**(obj.get("spec") or {}), **body.get("spec", {})}
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._changed("MODIFIED", resource, obj)
        return copy.deepcopy(obj)

    async def list_pages(self, resource: Resource, namespace: str | None, *,
                         label_selector: str = "", field_selector: str = "",
                         limit: int = 500) -> AsyncIterator[tuple[list[Obj], str]]:
        items = [copy.deepcopy(o) for (plural, ns, _), o in self.objects.items()
                 if plural == resource.plural and namespace in (None, ns)
                 and _selects(label_selector, o)]
        yield items, str(next(self._rv))

    async def watch(self, resource: Resource, namespace: str | None, resource_version: str, *,
                    label_selector: str = "", field_selector: str = "",
                    timeout_seconds: int = 300, on_open: Callable[[], None] | None = None
                    ) -> AsyncIterator[Obj]:
        watch = _Watch(resource, namespace, label_selector)
        self._watches.append(watch)
        if on_open is not None:
            on_open()
        try:
            while True:
                yield await watch.events.get()
        finally:
            self._watches.remove(watch)

    # What a test does --------------------------------------------------------------------

    def put(self, resource: Resource, obj: Obj) -> Obj:
        """Create or replace an object as someone else would (a user, the kubelet)."""
        meta = obj["metadata"]
        key = (resource.plural, meta["namespace"], meta["name"])
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta["resourceVersion"] = str(next(self._rv))
        etype = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = obj
        self._changed(etype, resource, obj)
        return obj

    def remove(self, resource: Resource, namespace: str, name: str) -> None:
        """Delete an object as someone else would."""
        obj = self.objects.pop((resource.plural, namespace, name))
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._changed("DELETED", resource, obj)

    def deliver(self) -> int:
        """Hand every change made so far to the watches that select it; returns how many."""
        pending, self._undelivered = self._undelivered, []
        for etype, resource, obj in pending:
            for watch in self._watches:
                if watch.resource.plural == resource.plural and \
                        watch.namespace in (None, obj["metadata"]["namespace"]) and \
                        _selects(watch.selector, obj):
                    watch.events.put_nowait({"type": etype, "object": copy.deepcopy(obj)})
        return len(pending)

    def pending_events(self) -> int:
        """Events handed to watches and not yet taken by them."""
        return sum(w.events.qsize() for w in self._watches)

    def of(self, resource: Resource, namespace: str | None = None) -> list[Obj]:
        return [o for (plural, ns, _), o in sorted(self.objects.items())
                if plural == resource.plural and namespace in (None, ns)]

    def of_events(self) -> list[Obj]:
        return [o for (plural, _, _), o in self.objects.items() if plural == "events"]

    def made(self, verb: str, kind: str) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and c.kind == kind]

    # Inside ------------------------------------------------------------------------------

    def _call(self, verb: str, resource: Resource, namespace: str, name: str,
              body: Obj | None = None) -> None:
        self.calls.append(Call(verb, resource.kind, namespace, name, body))
        error = self.refuse(verb, resource.kind, body)
        if error is not None:
            raise error

    def _changed(self, etype: str, resource: Resource, obj: Obj) -> None:
        self._undelivered.append((etype, resource, copy.deepcopy(obj)))


def _selects(selector: str, obj: Obj) -> bool:
    """The API server's label selection, by the parser the operator's cache uses."""
    return parse_selector(selector).matches((obj.get("metadata") or {}).get("labels") or {})


__all__ = ["ApiConflict", "ApiNotFound", "Call", "FakeKube", "status_error"]
