"""Who sent a progress report: the pod (and its job) a bearer token was issued for.

Why a TokenReview and a pod GET: the token is a service-account token the kubelet projected
into the replica's pod with our audience (`AUDIENCE`), bound to that pod. The API server is
the only one that can say it is valid (signature, expiry, audience, and the pod still
existing), and its answer names the pod (`authentication.kubernetes.io/pod-name`/`pod-uid`).
The pod's controller ownerReference then names the job; the server compares it with the job
the report claims. A token of any other kind (a user's, an unbound service-account token) is
refused, since it says nothing about a job.

Why a cache: a replica reports every few seconds with the same token (the kubelet rotates it
about hourly), so the whole answer is kept by sha256(token) for `ttl` seconds (never past
the token's own `exp`), at most `max_entries` tokens (least recently used evicted): a steady
reporter costs one TokenReview and one GET per `ttl`, not per report. A refused token is kept
`negative_ttl` seconds, and at most `concurrency` reviews run at once, so a flood of bad
tokens costs the API server a bounded rate of calls.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from trainjobs.core.progress_pod import AUDIENCE
from trainjobs.errors import TrainjobsError
from trainjobs.kube import Kube
from trainjobs.kube.errors import ApiNotFound
from trainjobs.kube.resources import PODS, Resource
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock

__all__ = ["AUDIENCE", "TOKEN_REVIEWS", "Forbidden", "Identifier", "PodIdentity",
           "TokenReviewer", "Unauthenticated", "job_owner"]

TOKEN_REVIEWS = Resource("TokenReview", "tokenreviews", "authentication.k8s.io", "v1")
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"


class Unauthenticated(TrainjobsError):
    """No token, or one the API server does not accept for our audience (HTTP 401)."""

    status = 401


class Forbidden(TrainjobsError):
    """A valid token whose pod may not report this (HTTP 403)."""

    status = 403


@dataclass(frozen=True)
class PodIdentity:
    """The pod a token was issued for, and its controller (the job, when it is one)."""

    namespace: str
    pod: str
    pod_uid: str
    owner_api_version: str
    owner_kind: str
    owner_name: str
    owner_uid: str


class Identifier(Protocol):
    async def identify(self, token: str) -> PodIdentity:
        """The pod of `token`; raises `Unauthenticated` (or `Forbidden`)."""
        ...


def job_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controller ownerReference, if any."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def token_expiry(token: str) -> float | None:
    """The JWT's `exp` (Unix seconds), read without checking (the TokenReview checks)."""
    try:
        payload = token.split(".")[1]
        doc = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = doc.get("exp")
        return float(exp) if isinstance(exp, int | float) else None
    except (IndexError, ValueError, TypeError, AttributeError):
        return None


@dataclass
class _Cached:
    until: float  # monotonic
    identity: PodIdentity | None
    error: TrainjobsError | None


class TokenReviewer:
    """Identifies tokens through the API server, caching the answers (see the module doc)."""

    def __init__(self, kube: Kube, clock: Clock = SYSTEM_CLOCK, *, ttl: float = 60.0,
                 negative_ttl: float = 10.0, max_entries: int = 4096, concurrency: int = 8,
                 audiences: Collection[str] = (AUDIENCE,)) -> None:
        self.kube = kube
        self.clock = clock
        self.ttl, self.negative_ttl, self.max_entries = ttl, negative_ttl, max_entries
        self.audiences = list(audiences)
        self.reviews = 0  # TokenReviews sent (for tests and the docs' claim)
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._limit = asyncio.Semaphore(concurrency)

    async def identify(self, token: str) -> PodIdentity:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit.until > now:
            self._cache.move_to_end(key)
            if hit.error is not None:
                raise hit.error
            assert hit.identity is not None
            return hit.identity
        async with self._limit:
            try:
                identity = await self._review(token)
            except (Unauthenticated, Forbidden) as refused:
                self._keep(key, _Cached(self.clock.monotonic() + self.negative_ttl, None,
                                        refused))
                raise
        until = self.clock.monotonic() + self.ttl
        exp = token_expiry(token)
        if exp is not None:
            until = min(until, self.clock.monotonic() + exp - self.clock.now().timestamp())
        self._keep(key, _Cached(until, identity, None))
        return identity

    def _keep(self, key: str, entry: _Cached) -> None:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)

    def __len__(self) -> int:
        return len(self._cache)

    async def _review(self, token: str) -> PodIdentity:
        """One TokenReview and one pod GET. An unreachable API server raises `ApiError`
        (not cached: the server answers 503 and the client retries later)."""
        self.reviews += 1
        review = await self.kube.request("POST", TOKEN_REVIEWS.url(None), {
            "apiVersion": TOKEN_REVIEWS.api_version, "kind": "TokenReview",
            "spec": {"token": token, "audiences": self.audiences}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            raise Unauthenticated(f"token not accepted: {status.get('error') or 'invalid'}")
        user = status.get("user") or {}
        username, extra = str(user.get("username", "")), user.get("extra") or {}
        names, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
        if not username.startswith(SA_PREFIX) or not names or not uids:
            raise Unauthenticated("not a pod-bound service-account token (mint it with a "
                                  "projected serviceAccountToken volume)")
        namespace = username[len(SA_PREFIX):].split(":", 1)[0]
        pod_name, pod_uid = str(names[0]), str(uids[0])
        try:
            pod = await self.kube.get(PODS, namespace, pod_name)
        except ApiNotFound:
            raise Unauthenticated(f"pod {namespace}/{pod_name} is gone") from None
        if pod.get("metadata", {}).get("uid") != pod_uid:
            raise Unauthenticated(f"pod {namespace}/{pod_name} was replaced (uid differs)")
        owner = job_owner(pod)
        if owner is None:
            raise Forbidden(f"pod {namespace}/{pod_name} has no controller: not a job's replica")
        return PodIdentity(namespace, pod_name, pod_uid, str(owner.get("apiVersion", "")),
                           str(owner.get("kind", "")), str(owner.get("name", "")),
                           str(owner.get("uid", "")))

