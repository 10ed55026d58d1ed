"""The controller's start-up questions to the API server about Kueue (`discover`, `refused`):
an answer that decides nothing (a 5xx, a 429, no connection) is asked again with a growing
delay, and only an answer that decides ends the question."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from trainjobs.kube import ApiError, Kube, Resource, api_error
from trainjobs.operator.gates.kueue import discover, refused

_SERVED = {"resources": [{"name": "workloads"}, {"name": "clusterqueues"}]}


class _Scripted:
    """Answers `request` and `list_pages` from a script: an ApiError is raised, else returned."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def _next(self, what: str) -> Any:
        self.asked.append(what)
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    async def request(self, verb: str, path: str) -> Any:
        return self._next(path)

    async def list_pages(self, resource: Resource, namespace: str | None, *,
                         limit: int) -> AsyncIterator[Any]:
        yield self._next(f"{resource.plural}/{namespace}")


class _Sleeps:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.slept.append(delay)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _kube(scripted: _Scripted) -> Kube:
    return cast(Kube, scripted)


def test_discover_asks_again_until_served_or_not_found() -> None:
    sleeps = _Sleeps()
    kube = _Scripted(api_error(503, "ServiceUnavailable"), api_error(0, "refused"),
                     api_error(429, "TooManyRequests"), _SERVED)
    assert _run(discover(_kube(kube), sleeps)) is True
    assert sleeps.slept == [0.5, 1.0, 2.0]
    assert _run(discover(_kube(_Scripted(api_error(404, "NotFound"))), sleeps)) is False
    assert _run(discover(_kube(_Scripted({"resources": [{"name": "clusterqueues"}]})),
                         sleeps)) is False


def test_refused_names_the_first_resource_rbac_refuses() -> None:
    sleeps = _Sleeps()
    rbac = api_error(403, "Forbidden", '{"message": "workloads is forbidden"}')
    kube = _Scripted(api_error(500, "InternalError"), {}, rbac)
    why = _run(refused(_kube(kube), ["a", "b"], sleeps))
    assert why is not None and why.startswith("workloads.kueue.x-k8s.io: ")
    assert kube.asked == ["workloads/a", "workloads/a", "workloads/b"]
    assert sleeps.slept == [0.5]


def test_refused_none_when_every_list_answers() -> None:
    sleeps = _Sleeps()
    quota = api_error(403, "Forbidden",
                      '{"message": "exceeded quota: q, requested: pods=1"}')
    kube = _Scripted(quota, {}, {}, {}, {})
    assert _run(refused(_kube(kube), [None], sleeps)) is None
    assert kube.asked == ["workloads/None", "workloads/None", "resourceflavors/None",
                          "workloadpriorityclasses/None", "priorityclasses/None"]
    assert sleeps.slept == [0.5]


def test_delay_stops_growing_at_ten_seconds() -> None:
    sleeps = _Sleeps()
    kube = _Scripted(*[api_error(503, "ServiceUnavailable")] * 7, _SERVED)
    assert _run(discover(_kube(kube), sleeps)) is True
    assert sleeps.slept == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
