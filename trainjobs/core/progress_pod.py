"""What a replica's pod gets on a cluster to report progress: its own pod-bound token.

Why a projected service-account token: the kubelet mints it for this pod alone, with our
audience (useless against the API server or anything else), rotates it before it expires, and
the API server stops accepting it once the pod is gone; the operator checks it with a
TokenReview (trainjobs/operator/token_review.py). No Secret is created, nothing is copied into
the job's namespace, and the pod's service account needs no permission at all.

One volume per pod, mounted read-only at the same path in every container, so any container
of any kind (a plugin's too) can report without the plugin doing anything.
"""

from __future__ import annotations

from typing import Any

from trainjobs.core.progress import ProgressEndpoint
from trainjobs.errors import SpecError

__all__ = ["AUDIENCE", "TOKEN_DIR", "TOKEN_EXPIRATION_SECONDS", "TOKEN_FILE", "VOLUME",
           "add_token_volume"]

# The audience of the projected token: a token minted for the API server (or anyone else) is
# refused by the operator, and this one is refused by everyone else.
AUDIENCE = "trainjobs.io/progress"
VOLUME = "trainjobs-progress"
TOKEN_DIR = "/var/run/secrets/trainjobs.io/progress"
TOKEN_FILE = f"{TOKEN_DIR}/token"
# The kubelet refreshes a projected token at 80% of its life; the library reads the file on
# every send, so an hour is only how long a stolen token stays useful.
TOKEN_EXPIRATION_SECONDS = 3600


def add_token_volume(pod: dict[str, Any], progress: ProgressEndpoint, where: str,
                     errors: list[SpecError]) -> None:
    """Add the token volume to `pod` and mount it in every container (a name or path the
    template already uses is an error at `where`, never overwritten)."""
    spec = pod["spec"]
    volumes = spec.setdefault("volumes", [])
    if any(v.get("name") == VOLUME for v in volumes):
        errors.append(SpecError(f"{where}.template.spec.volumes", f"the volume name {VOLUME} "
                                f"is reserved for trainjobs' progress token; rename it"))
        return
    volumes.append({"name": VOLUME, "projected": {"defaultMode": 0o444, "sources": [
        {"serviceAccountToken": {"audience": progress.audience,
                                 "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                                 "path": TOKEN_FILE.rsplit("/", 1)[1]}}]}})
    for i, container in enumerate(spec["containers"]):
        mounts = container.setdefault("volumeMounts", [])
        if any(m.get("mountPath") == TOKEN_DIR for m in mounts):
            errors.append(SpecError(f"{where}.template.spec.containers[{i}].volumeMounts",
                                    f"{TOKEN_DIR} is where trainjobs mounts the progress "
                                    f"token; mount something else there"))
            continue
        mounts.append({"name": VOLUME, "mountPath": TOKEN_DIR, "readOnly": True})
