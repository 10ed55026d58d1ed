"""The API resources trainjobs reads and writes, and the URL of each.

Why a value and not generated API classes: the transport speaks raw JSON to paths; a
`Resource` is all it needs to know of a kind (its group, version and plural).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainjobs.api.models import GROUP, VERSION

__all__ = [
    "BY_API_KIND",
    "BY_KIND",
    "DEPLOYMENTS",
    "EVENTS",
    "LEASES",
    "PODS",
    "SERVICES",
    "Resource",
    "job_resource",
]


@dataclass(frozen=True)
class Resource:
    """An API resource (a kind of object) as the API server serves it."""

    kind: str
    plural: str
    group: str = ""
    version: str = "v1"

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    @classmethod
    def of(cls, api_version: str, kind: str, plural: str) -> Resource:
        """The resource of an `apiVersion` as manifests write it (`v1`, `apps/v1`)."""
        group, _, version = api_version.rpartition("/")
        return cls(kind, plural, group, version)

    @property
    def path(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def url(self, namespace: str | None, name: str | None = None, sub: str = "") -> str:
        ns = f"/namespaces/{namespace}" if namespace else ""
        tail = f"/{name}" if name else ""
        return f"{self.path}{ns}/{self.plural}{tail}{'/' + sub if sub else ''}"


PODS = Resource("Pod", "pods")
SERVICES = Resource("Service", "services")
EVENTS = Resource("Event", "events")
DEPLOYMENTS = Resource("Deployment", "deployments", "apps", "v1")
LEASES = Resource("Lease", "leases", "coordination.k8s.io", "v1")
BY_KIND = {r.kind: r for r in (PODS, SERVICES, EVENTS, DEPLOYMENTS, LEASES)}
#: The same by (apiVersion, kind): what extra objects are created through. The controller adds
#: the kinds plugins declare (`trainjobs_owned_resources`: the gang schedulers' PodGroups,
#: two kinds of the same name in different groups).
BY_API_KIND = {(r.api_version, r.kind): r for r in BY_KIND.values()}


def job_resource(kind: str, plural: str, group: str = GROUP, version: str = VERSION) -> Resource:
    """A job kind's resource: trainjobs.io/v1alpha1 unless its framework names another group
    (`Framework.group`/`version`, plugin API 1.5)."""
    return Resource(kind, plural, group, version)
