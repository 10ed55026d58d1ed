"""Counting the writes a benchmark caused: the API server's audit log (who wrote what) and
its apiserver_request_total counters (how many), attributed to the operator's kinds of write.

Why both: the counters are exact and cheap but do not say who wrote; the audit log says who
(by user agent) but is off in runs that turn it off for speed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench.api import BENCH_UA, CEILING_UA, Api
from trainjobs.testing import agent_of

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
_BENCH_AGENTS = ((CEILING_UA, "ceiling"), (BENCH_UA, "bench"))


def audit_writes(events: Iterable[dict[str, Any]], namespace: str | None = None
                 ) -> dict[str, Counter[str]]:
    """Writes per component, keyed `VERB resource[/subresource]`."""
    out: dict[str, Counter[str]] = {}
    for ev in events:
        ref = ev.get("objectRef") or {}
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        res = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource")
                                          else "")
        who = agent_of(ev.get("userAgent", ""), _BENCH_AGENTS)
        out.setdefault(who, Counter())[f"{ev.get('verb', '?')} {res}"] += 1
    return out



_METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def write_counters(api: Api) -> Counter[str]:
    """apiserver_request_total of write verbs, keyed `VERB group/resource[/subresource]`."""
    out: Counter[str] = Counter()
    for line in (await api.metrics()).splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("verb") not in WRITE_VERBS:
            continue
        res = labels.get("resource", "")
        if labels.get("group"):
            res = f"{labels['group']}/{res}"
        if labels.get("subresource"):
            res += f"/{labels['subresource']}"
        out[f"{labels['verb']} {res}"] += int(float(m.group("value")))
    return out


def counter_diff(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in sorted(after)
            if after[k] - before.get(k, 0)}


# Writes the operator makes (and nothing else makes in a bench namespace while it runs):
# pods and Services it creates or deletes, the job status it patches, the Events it records.
def operator_write_keys(plural: str, group: str = "trainjobs.io") -> dict[str, tuple[str, ...]]:
    return {
        "pods": ("POST pods", "DELETE pods"),
        "services": ("POST services", "DELETE services"),
        "status": (f"PATCH {group}/{plural}/status", f"PUT {group}/{plural}/status",
                   f"APPLY {group}/{plural}/status"),
        "job_updates": (f"PATCH {group}/{plural}", f"PUT {group}/{plural}"),
        "events": ("POST events", "PATCH events", "PUT events"),
    }


def attribute(diff: dict[str, int], plural: str, group: str = "trainjobs.io") -> dict[str, int]:
    out = {}
    for name, keys in operator_write_keys(plural, group).items():
        out[name] = sum(diff.get(k, 0) for k in keys)
    return out
