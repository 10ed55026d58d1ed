"""The transport: the one package that talks to the Kubernetes API server.

Why one package below everything else (kopf's `_cogs/clients` split): the operator, the
Python client, the CLI, the benchmarks and the test harness reach the API server through the
same connection code (`connect`, `Kube`), the same typed errors (`errors`: `ApiNotFound`,
`ApiConflict`, `ApiConnectionError`...), the same reachability record and the same
list-then-watch (`listwatch`), so each of these is written, and fixed, once. It imports
nothing of the operator or the client.

The test harness starts the control plane with a small synchronous stdlib client
(`trainjobs/testing/_kubeapi.py`: probe /readyz before the API server answers, create and list
fake nodes, apply Kueue objects), used from synchronous fixtures and the `trainjobs` CLI with
no event loop; its answers are this package's typed errors (`api_error`). So that it pays
only for what it uses, the heavy submodules load on first use (`__getattr__`): importing
`trainjobs.kube.errors` costs no aiohttp import (kubernetes-asyncio's, when the transport
used it, was 2.3-3.6 s measured with `python -X importtime` on the shared machine, against
0.13-0.18 s for the harness).

- `api`: `connect` (kubeconfig or in-cluster: `kubeconfig`) and `Kube` (raw-JSON requests,
  paged lists, watches, streamed logs) over one aiohttp session (`Transport`).
- `kubeconfig`: the server and credentials of a kubeconfig context or the service account.
- `errors`: the API error tree, chosen once from each response.
- `resources`: `Resource` (a kind's URL) and the kinds trainjobs uses.
- `reachability`: since when the API server has not answered.
- `listwatch`: the one list-then-watch loop (the informer, the client's watch and the
  benchmarks' watcher follow resources with it).
- `informer`: a cache of reduced objects kept by list-then-watch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainjobs.kube.errors import (
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
from trainjobs.kube.reachability import Reachability

if TYPE_CHECKING:
    from trainjobs.kube.api import (
        LIST_PAGE_SIZE,
        ErrorHook,
        Kube,
        Query,
        Transport,
        connect,
        gather_limited,
        split_lines,
    )
    from trainjobs.kube.kubeconfig import KubeconfigError
    from trainjobs.kube.listwatch import ListWatch, WatchEvent
    from trainjobs.kube.resources import (
        BY_API_KIND,
        BY_KIND,
        DEPLOYMENTS,
        EVENTS,
        LEASES,
        PODS,
        SERVICES,
        Resource,
        job_resource,
    )

#: The names whose module loads on first use: aiohttp and orjson (api), yaml (kubeconfig),
#: pydantic (resources).
_LAZY = {
    **dict.fromkeys(("LIST_PAGE_SIZE", "ErrorHook", "Kube", "Query", "Transport", "connect",
                     "gather_limited", "split_lines"), "api"),
    "KubeconfigError": "kubeconfig",
    **dict.fromkeys(("ListWatch", "WatchEvent"), "listwatch"),
    **dict.fromkeys(("BY_API_KIND", "BY_KIND", "DEPLOYMENTS", "EVENTS", "LEASES", "PODS",
                     "SERVICES", "Resource", "job_resource"), "resources"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BY_API_KIND",
    "BY_KIND",
    "DEPLOYMENTS",
    "EVENTS",
    "LEASES",
    "LIST_PAGE_SIZE",
    "PODS",
    "SERVICES",
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
    "ErrorHook",
    "Kube",
    "KubeconfigError",
    "ListWatch",
    "NamespaceTerminating",
    "Query",
    "Reachability",
    "Resource",
    "Transport",
    "WatchDropped",
    "WatchEvent",
    "api_error",
    "connect",
    "gather_limited",
    "job_resource",
    "split_lines",
]
