"""The HTTP side of a progress receiver, shared by `trainjobs run`'s (local/receiver.py) and
the operator's (operator/progress_server.py): reading a report within its limits, and the
JSON reply.

Why one module: the two receivers must refuse the same bodies with the same statuses and
words (the library reacts to them, docs/progress.md); the rules of a report's content are
core/progress.py's, this is only the transport's part.
"""

from __future__ import annotations

import json
import math

from aiohttp import web

from trainjobs.core.progress import MAX_BODY_BYTES, ProgressReport, ReportRefused, parse_report

__all__ = ["read_report", "reply"]


async def read_report(request: web.Request) -> ProgressReport:
    """The report `request` carries, or `ReportRefused`: 415 not JSON, 413 too large, 400
    malformed (core's rules)."""
    if request.content_type != "application/json":
        raise ReportRefused(415, f"Content-Type must be application/json, got "
                                 f"{request.content_type or 'none'}")
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise ReportRefused(413, f"body of {request.content_length} bytes, at most "
                                 f"{MAX_BODY_BYTES}")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ReportRefused(413, f"body over {MAX_BODY_BYTES} bytes") from None
    return parse_report(body)


def reply(status: int, body: dict[str, object], retry_after: float | None = None
          ) -> web.Response:
    """A JSON answer (with Retry-After in whole seconds, at least 1, when given)."""
    headers = {} if retry_after is None else {"Retry-After": str(max(1, math.ceil(retry_after)))}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json",
                        headers=headers)
