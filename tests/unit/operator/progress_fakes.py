"""A fake API server for the progress endpoint's tests: TokenReviews of known tokens and the
pods they are bound to, counting the calls (a cache must save them)."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.unit.fake_kube import status_error

NS = "team-a"


def jwt(exp: float | None = None) -> str:
    """A token shaped like a JWT (only `exp` is read without the API server)."""
    claims = {} if exp is None else {"exp": exp}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.c2ln"


def pod(name: str, uid: str, job: str, job_uid: str, kind: str = "MxJob",
        api_version: str = "trainjobs.io/v1alpha1", namespace: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "ownerReferences": [
        {"apiVersion": api_version, "kind": kind, "name": job, "uid": job_uid,
         "controller": True}]}}


class FakeApi:
    """`Kube.request` (TokenReview POSTs) and `Kube.get` (pods) only."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, Any]] = {}  # token -> TokenReview status
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.reviews = 0
        self.gets = 0
        self.down = False

    def bind(self, token: str, obj: dict[str, Any], sa: str = "default") -> None:
        """`token` is a valid pod-bound token of `obj`'s pod."""
        meta = obj["metadata"]
        self.pods[(meta["namespace"], meta["name"])] = obj
        self.tokens[token] = {"authenticated": True, "user": {
            "username": f"system:serviceaccount:{meta['namespace']}:{sa}",
            "extra": {"authentication.kubernetes.io/pod-name": [meta["name"]],
                      "authentication.kubernetes.io/pod-uid": [meta["uid"]]}}}

    async def request(self, verb: str, url: str, body: Any = None, **_: Any) -> dict[str, Any]:
        assert (verb, url) == ("POST", "/apis/authentication.k8s.io/v1/tokenreviews")
        assert body["spec"]["audiences"] == ["trainjobs.io/progress"]
        if self.down:
            raise status_error(0, "", "connection refused")
        self.reviews += 1
        status = self.tokens.get(body["spec"]["token"],
                                 {"authenticated": False, "error": "invalid bearer token"})
        return {"kind": "TokenReview", "status": status}

    async def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        obj = self.pods.get((namespace, name))
        if obj is None:
            raise status_error(404, "NotFound", f"pods {name!r} not found")
        return obj
