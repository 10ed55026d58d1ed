"""The typed tree of Kubernetes API errors (kopf-style), chosen once from the response.

Why a tree: callers write `except ApiNotFound` instead of comparing status integers, and the
questions that need the response body (is this 409 an AlreadyExists? is this 403 a
ResourceQuota refusal or RBAC? how long does this 429 ask us to wait?) are answered in one
place. Every raise site builds its error through `api_error`, so each gets the right class.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from trainjobs.errors import TemporaryError

__all__ = [
    "ApiBadRequest",
    "ApiConflict",
    "ApiConnectionError",
    "ApiError",
    "ApiForbidden",
    "ApiGone",
    "ApiInvalid",
    "ApiNotFound",
    "ApiServerError",
    "ApiTooManyRequests",
    "NamespaceTerminating",
    "WatchDropped",
    "api_error",
]

# The admission plugin's words (k8s.io/apiserver/pkg/admission/plugin/resourcequota):
# "exceeded quota: NAME, requested: ..., used: ..., limited: ..." (the quota is full) and
# "status unknown for quota: NAME, resource: ..." (its usage is not computed yet). Both pass.
_QUOTA_WAIT = re.compile(r"(?:exceeded quota|status unknown for quota): ([^,\s]+)")


class ApiError(Exception):
    """An API call failed. `status` is the HTTP status (0 when no response came), `reason`
    the HTTP reason phrase, `body` the raw response; `details` is the decoded Status object
    the API server sends (empty when the body is not one)."""

    def __init__(self, status: int, reason: str, body: str = "",
                 headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        self.headers: Mapping[str, str] = headers or {}
        self.details: dict[str, Any] = _decode(body)
        super().__init__(f"{status}: {self.message}")

    @property
    def message(self) -> str:
        """The API server's message (the Status `message`), else the reason phrase."""
        return str(self.details.get("message") or self.reason)

    @property
    def status_reason(self) -> str:
        """The Status object's machine-readable reason (AlreadyExists, Forbidden, Invalid,
        Expired...), empty when the body is not a Status."""
        return str(self.details.get("reason") or "")

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later unchanged."""
        return False

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asks us to wait (Retry-After, or the Status's
        details.retryAfterSeconds), if it said."""
        raw = self.headers.get("Retry-After") or self.headers.get("retry-after")
        if raw is None:
            raw = (self.details.get("details") or {}).get("retryAfterSeconds")
        try:
            return max(0.0, float(raw)) if raw is not None else None
        except (TypeError, ValueError):
            return None

    def temporary(self, delay: float = 1.0) -> TemporaryError:
        return TemporaryError(str(self), self.retry_after or delay)


class ApiConnectionError(ApiError):
    """No response came (refused, reset, timed out): status 0."""

    def __init__(self, reason: str) -> None:
        super().__init__(0, reason)

    @property
    def retryable(self) -> bool:
        return True


class WatchDropped(ApiConnectionError):
    """A watch that was established broke in the middle of its stream (a connection reset,
    an API server or load balancer going away): not a failure to reach the server."""


class ApiBadRequest(ApiError):
    """400: the request is malformed."""


class ApiForbidden(ApiError):
    """403: refused by authorization (RBAC), by a ResourceQuota, or by an admission plugin
    (a namespace being terminated...). Only a quota refusal can pass by itself."""

    @property
    def quota(self) -> str | None:
        """The ResourceQuota that refused the request when it is full (or not yet counted),
        else None. A quota that refuses a pod for a missing limit ("failed quota: q: must
        specify limits.cpu") is not one: that pod never fits."""
        found = _QUOTA_WAIT.search(self.message)
        return found.group(1) if found else None

    @property
    def quota_exceeded(self) -> bool:
        return self.quota is not None

    @property
    def retryable(self) -> bool:
        return self.quota_exceeded


class NamespaceTerminating(ApiForbidden):
    """403 from the NamespaceLifecycle admission plugin: nothing new may be created in a
    namespace that is being deleted, and everything in it (the job too) goes with it. Not a
    refusal of the job: there is nothing to fail and nothing to retry. Told apart by the
    Status cause `NamespaceTerminating` (k8s.io/apiserver's lifecycle admission), not by its
    message."""


class ApiNotFound(ApiError):
    """404: the object (or its namespace, or the resource type) does not exist."""


class ApiConflict(ApiError):
    """409: the object already exists (a create), or was changed since it was read (an
    update with a stale resourceVersion)."""

    @property
    def already_exists(self) -> bool:
        return self.status_reason == "AlreadyExists"


class ApiGone(ApiError):
    """410: a watch or list resourceVersion is too old; list again."""


class ApiInvalid(ApiError):
    """422: the object fails the API server's validation (schema, CEL rules, field ranges)."""


class ApiTooManyRequests(ApiError):
    """429: API priority and fairness (or an eviction budget) asks us to slow down."""

    @property
    def retryable(self) -> bool:
        return True


class ApiServerError(ApiError):
    """5xx: the API server (or a webhook it called, or etcd) failed; retry."""

    @property
    def retryable(self) -> bool:
        return True


_BY_STATUS: dict[int, type[ApiError]] = {
    400: ApiBadRequest, 403: ApiForbidden, 404: ApiNotFound, 409: ApiConflict, 410: ApiGone,
    422: ApiInvalid, 429: ApiTooManyRequests,
}


def api_error(status: int, reason: str, body: str = "",
              headers: Mapping[str, str] | None = None) -> ApiError:
    """The error of the class that this response calls for (status 0: no response)."""
    if status == 0:
        return ApiConnectionError(reason)
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ApiServerError if status >= 500 else ApiError
    error = cls(status, reason, body, headers)
    if cls is ApiForbidden and _has_cause(error.details, "NamespaceTerminating"):
        return NamespaceTerminating(status, reason, body, headers)
    return error


def _has_cause(details: dict[str, Any], cause: str) -> bool:
    causes = (details.get("details") or {}).get("causes")
    return isinstance(causes, list) and any(
        isinstance(c, dict) and c.get("reason", c.get("type")) == cause for c in causes)


def _decode(body: str) -> dict[str, Any]:
    if not body:
        return {}
    try:
        decoded = json.loads(body)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}
