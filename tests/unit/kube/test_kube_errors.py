"""The API error tree: each response gets its class, and the body answers the finer questions
(AlreadyExists, a ResourceQuota refusal or RBAC, Retry-After). The bodies are Status objects
as kube-apiserver 1.31 sends them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainjobs.errors import TemporaryError
from trainjobs.kube import (
    ApiBadRequest,
    ApiConflict,
    ApiConnectionError,
    ApiError,
    ApiForbidden,
    ApiGone,
    ApiInvalid,
    ApiNotFound,
    ApiServerError,
    ApiTooManyRequests,
    NamespaceTerminating,
    WatchDropped,
    api_error,
)


def _status(code: int, reason: str, message: str, **details: Any) -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure", "message": message, "reason": reason,
                       "details": details, "code": code})


QUOTA_403 = _status(
    403, "Forbidden",
    'pods "train-worker-3" is forbidden: exceeded quota: team-a, requested: '
    "requests.cpu=2, used: requests.cpu=8, limited: requests.cpu=8",
    name="train-worker-3", kind="pods")
QUOTA_UNKNOWN_403 = _status(
    403, "Forbidden",
    'pods "train-worker-0" is forbidden: status unknown for quota: team-a, resource: '
    "requests.cpu", name="train-worker-0", kind="pods")
QUOTA_LIMITS_403 = _status(
    403, "Forbidden",
    'pods "train-worker-0" is forbidden: failed quota: team-a: must specify limits.cpu '
    "for: worker; limits.memory for: worker", name="train-worker-0", kind="pods")
RBAC_403 = _status(
    403, "Forbidden",
    'pods is forbidden: User "system:serviceaccount:ops:trainjobs" cannot create resource '
    '"pods" in API group "" in the namespace "kube-system"', kind="pods")
EXISTS_409 = _status(409, "AlreadyExists", 'pods "train-worker-0" already exists',
                     name="train-worker-0", kind="pods")
STALE_409 = _status(
    409, "Conflict",
    'Operation cannot be fulfilled on leases.coordination.k8s.io "trainjobs": the object '
    "has been modified; please apply your changes to the latest version and try again",
    name="trainjobs", group="coordination.k8s.io", kind="leases")
NOT_FOUND_404 = _status(404, "NotFound", 'pods "train-worker-9" not found',
                        name="train-worker-9", kind="pods")
EXPIRED_410 = _status(410, "Expired", "too old resource version: 100 (2043)")
INVALID_422 = _status(
    422, "Invalid",
    'Service "train-worker-0" is invalid: spec.ports[0].port: Invalid value: -1: must be '
    "between 1 and 65535, inclusive", name="train-worker-0", kind="Service")
BAD_400 = _status(400, "BadRequest", "the server rejected our request for an unknown reason")
THROTTLED_429 = _status(429, "TooManyRequests",
                        "too many requests, please try again later", retryAfterSeconds=3)
WEBHOOK_500 = _status(
    500, "InternalError",
    'Internal error occurred: failed calling webhook "pods.example.com": context deadline '
    "exceeded")


@pytest.mark.parametrize(("status", "body", "cls", "retryable"), [
    (400, BAD_400, ApiBadRequest, False),
    (403, RBAC_403, ApiForbidden, False),
    (403, QUOTA_403, ApiForbidden, True),
    (404, NOT_FOUND_404, ApiNotFound, False),
    (409, EXISTS_409, ApiConflict, False),
    (410, EXPIRED_410, ApiGone, False),
    (422, INVALID_422, ApiInvalid, False),
    (429, THROTTLED_429, ApiTooManyRequests, True),
    (500, WEBHOOK_500, ApiServerError, True),
    (503, "service unavailable", ApiServerError, True),
    (418, "", ApiError, False),
])
def test_the_status_picks_the_class(status: int, body: str, cls: type[ApiError],
                                    retryable: bool) -> None:
    err = api_error(status, "Reason", body)
    assert type(err) is cls
    assert err.status == status
    assert err.retryable is retryable
    assert err.body == body


def test_the_message_is_the_api_servers() -> None:
    err = api_error(404, "Not Found", NOT_FOUND_404)
    assert err.message == 'pods "train-worker-9" not found'
    assert str(err) == '404: pods "train-worker-9" not found'
    assert err.status_reason == "NotFound"
    assert err.reason == "Not Found"
    # A body that is not a Status (a proxy's HTML page): the reason phrase stands in.
    plain = api_error(502, "Bad Gateway", "<html>bad gateway</html>")
    assert plain.message == "Bad Gateway" and plain.status_reason == "" and plain.details == {}
    assert api_error(500, "x", "[1, 2]").details == {}


def test_a_quota_refusal_is_told_from_rbac() -> None:
    quota = api_error(403, "Forbidden", QUOTA_403)
    rbac = api_error(403, "Forbidden", RBAC_403)
    assert isinstance(quota, ApiForbidden) and isinstance(rbac, ApiForbidden)
    assert quota.quota_exceeded and quota.quota == "team-a"
    assert not rbac.quota_exceeded and rbac.quota is None
    unknown = api_error(403, "Forbidden", QUOTA_UNKNOWN_403)
    assert isinstance(unknown, ApiForbidden) and unknown.quota == "team-a" and unknown.retryable
    # A quota that wants limits the pod does not set refuses it every time: permanent.
    limits = api_error(403, "Forbidden", QUOTA_LIMITS_403)
    assert isinstance(limits, ApiForbidden) and limits.quota is None and not limits.retryable


def test_already_exists_is_told_from_a_stale_update() -> None:
    exists = api_error(409, "Conflict", EXISTS_409)
    stale = api_error(409, "Conflict", STALE_409)
    assert isinstance(exists, ApiConflict) and exists.already_exists
    assert isinstance(stale, ApiConflict) and not stale.already_exists


def test_retry_after_from_the_header_or_the_status() -> None:
    by_header = api_error(429, "Too Many Requests", "", {"Retry-After": "7"})
    assert by_header.retry_after == 7.0
    by_body = api_error(429, "Too Many Requests", THROTTLED_429)
    assert by_body.retry_after == 3.0
    temporary = by_body.temporary(1.0)
    assert isinstance(temporary, TemporaryError) and temporary.delay == 3.0
    assert api_error(429, "x", "", {"Retry-After": "soon"}).retry_after is None
    assert api_error(500, "x", WEBHOOK_500).temporary(2.0).delay == 2.0


def test_no_response_is_a_connection_error() -> None:
    err = api_error(0, "ClientConnectorError: refused")
    assert isinstance(err, ApiConnectionError) and err.retryable and err.status == 0
    dropped = WatchDropped("watch dropped: ServerDisconnectedError")
    assert isinstance(dropped, ApiConnectionError) and isinstance(dropped, ApiError)
    assert dropped.status == 0 and dropped.retryable


TERMINATING_403 = _status(
    403, "Forbidden",
    'pods "train-worker-0" is forbidden: unable to create new content in namespace team-a '
    "because it is being terminated", name="train-worker-0", kind="pods",
    causes=[{"reason": "NamespaceTerminating", "message": "namespace team-a is being terminated",
             "field": "metadata.namespace"}])


def test_a_namespace_being_deleted_is_its_own_403_by_the_status_cause() -> None:
    error = api_error(403, "Forbidden", TERMINATING_403)
    assert isinstance(error, NamespaceTerminating) and isinstance(error, ApiForbidden)
    assert not error.quota_exceeded and not error.retryable
    # The words alone do not make it one: only the cause the admission plugin sets does.
    bare = api_error(403, "Forbidden", _status(403, "Forbidden", json.loads(
        TERMINATING_403)["message"]))
    assert type(bare) is ApiForbidden
    assert type(api_error(403, "Forbidden", RBAC_403)) is ApiForbidden
