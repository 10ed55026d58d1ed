"""Identifying a progress report's sender (trainjobs/operator/token_review.py): a pod-bound
service-account token of our audience names its pod and the pod's job; anything else is
refused; answers are cached by token for a TTL (never past the token's expiry), in a
bounded LRU, so a steady reporter costs one TokenReview per TTL."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.unit.controller_harness import T0, FakeClock
from tests.unit.operator.progress_fakes import NS, FakeApi, jwt, pod
from trainjobs.kube import ApiError, Kube
from trainjobs.operator.token_review import Forbidden, TokenReviewer, Unauthenticated


def reviewer(api: FakeApi, clock: FakeClock, **options: Any) -> TokenReviewer:
    return TokenReviewer(cast(Kube, api), clock, **options)


async def test_a_pod_bound_token_names_its_pod_and_job() -> None:
    api, clock = FakeApi(), FakeClock()
    api.bind("t1", pod("mnist-worker-0", "p1", "mnist", "j1"))
    who = await reviewer(api, clock).identify("t1")
    assert (who.namespace, who.pod, who.pod_uid) == (NS, "mnist-worker-0", "p1")
    assert (who.owner_kind, who.owner_name, who.owner_uid) == ("MxJob", "mnist", "j1")


async def test_the_answer_is_cached_for_the_ttl_then_reviewed_again() -> None:
    api, clock = FakeApi(), FakeClock()
    api.bind("t1", pod("mnist-worker-0", "p1", "mnist", "j1"))
    tokens = reviewer(api, clock, ttl=60)
    for _ in range(100):
        await tokens.identify("t1")
        clock.advance(0.5)  # 50 s of reports, two a second
    assert (api.reviews, api.gets) == (1, 1)
    clock.advance(11)
    await tokens.identify("t1")
    assert (api.reviews, api.gets) == (2, 2)


async def test_the_cache_never_outlives_the_token() -> None:
    api, clock = FakeApi(), FakeClock()
    token = jwt(exp=T0.timestamp() + 5)
    api.bind(token, pod("mnist-worker-0", "p1", "mnist", "j1"))
    tokens = reviewer(api, clock, ttl=60)
    await tokens.identify(token)
    clock.advance(6)
    del api.tokens[token]  # expired: the API server no longer accepts it
    with pytest.raises(Unauthenticated):
        await tokens.identify(token)
    assert api.reviews == 2


async def test_the_cache_is_a_bounded_lru() -> None:
    api, clock = FakeApi(), FakeClock()
    for i in range(5):
        api.bind(f"t{i}", pod(f"mnist-worker-{i}", f"p{i}", "mnist", "j1"))
    tokens = reviewer(api, clock, max_entries=3)
    for i in range(5):
        await tokens.identify(f"t{i}")
    assert len(tokens) == 3 and api.reviews == 5
    await tokens.identify("t4")  # kept
    assert api.reviews == 5
    await tokens.identify("t0")  # evicted: reviewed again
    assert api.reviews == 6


async def test_unknown_tokens_are_refused_and_the_refusal_cached_briefly() -> None:
    api, clock = FakeApi(), FakeClock()
    tokens = reviewer(api, clock, negative_ttl=10)
    for _ in range(20):
        with pytest.raises(Unauthenticated, match="invalid bearer token"):
            await tokens.identify("forged")
    assert api.reviews == 1
    clock.advance(11)
    with pytest.raises(Unauthenticated):
        await tokens.identify("forged")
    assert api.reviews == 2


@pytest.mark.parametrize("user, words", [
    ({"username": "alice"}, "not a pod-bound"),
    ({"username": "system:serviceaccount:team-a:default"}, "not a pod-bound"),
])
async def test_a_token_not_bound_to_a_pod_is_refused(user: dict[str, Any], words: str) -> None:
    api, clock = FakeApi(), FakeClock()
    api.tokens["t"] = {"authenticated": True, "user": user}
    with pytest.raises(Unauthenticated, match=words):
        await reviewer(api, clock).identify("t")


async def test_a_replaced_or_gone_pod_and_a_pod_of_no_job_are_refused() -> None:
    api, clock = FakeApi(), FakeClock()
    api.bind("old", pod("mnist-worker-0", "p-old", "mnist", "j1"))
    api.bind("new", pod("mnist-worker-0", "p-new", "mnist", "j1"))  # same name, new uid
    with pytest.raises(Unauthenticated, match="replaced"):
        await reviewer(api, clock).identify("old")
    api.bind("gone", pod("gone-0", "p9", "mnist", "j1"))
    del api.pods[(NS, "gone-0")]
    with pytest.raises(Unauthenticated, match="gone"):
        await reviewer(api, clock).identify("gone")
    orphan = pod("bare", "p7", "x", "y")
    orphan["metadata"]["ownerReferences"] = []
    api.bind("bare", orphan)
    with pytest.raises(Forbidden, match="no controller"):
        await reviewer(api, clock).identify("bare")


async def test_an_unreachable_api_server_is_not_cached() -> None:
    api, clock = FakeApi(), FakeClock()
    api.bind("t1", pod("mnist-worker-0", "p1", "mnist", "j1"))
    tokens = reviewer(api, clock)
    api.down = True
    with pytest.raises(ApiError):
        await tokens.identify("t1")
    api.down = False
    assert (await tokens.identify("t1")).pod == "mnist-worker-0"
