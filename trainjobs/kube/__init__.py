"""The transport: the one package that talks to the Kubernetes API server.

Why one package below everything else (kopf's `_cogs/clients` split): the operator, the
Python client, the CLI, the benchmarks and the test harness reach the API server through the
same connection code (`connect`, `Kube`), the same typed errors (`errors`: `ApiNotFound`,
`ApiConflict`, `ApiConnectionError`...), the same reachability record and the same
list-then-watch (`listwatch`), so each of these is written, and fixed, once. It imports
nothing of the operator or the client.

One exception, on purpose: the test harness starts the control plane with a small synchronous
stdlib client (`trainjobs/testing/_kubeapi.py`: probe /readyz before the API server answers,
create and list fake nodes, apply Kueue objects), used from synchronous fixtures and the
`trainjobs` CLI with no event loop. Importing this package costs kubernetes-asyncio's import
(2.3-3.6 s measured with `python -X importtime` on the shared machine, against 0.13-0.18 s for
the whole harness module), which every harness start would then pay.

- `api`: `connect` (kubeconfig or in-cluster) and `Kube` (raw-JSON requests, paged lists,
  watches, streamed logs).
- `errors`: the API error tree, chosen once from each response.
- `resources`: `Resource` (a kind's URL) and the kinds trainjobs uses.
- `reachability`: since when the API server has not answered.
- `listwatch`: the one list-then-watch loop (the informer, the client's watch and the
  benchmarks' watcher follow resources with it).
- `informer`: a cache of reduced objects kept by list-then-watch.
"""

from __future__ import annotations

from trainjobs.kube.api import (
    LIST_PAGE_SIZE,
    ErrorHook,
    Kube,
    Query,
    connect,
    gather_limited,
    split_lines,
)
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
    WatchDropped,
    api_error,
)
from trainjobs.kube.listwatch import ListWatch, WatchEvent
from trainjobs.kube.reachability import Reachability
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
    "ListWatch",
    "Query",
    "Reachability",
    "Resource",
    "WatchDropped",
    "WatchEvent",
    "api_error",
    "connect",
    "gather_limited",
    "job_resource",
    "split_lines",
]
