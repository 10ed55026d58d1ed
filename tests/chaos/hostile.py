"""Hypothesis strategies of hostile job manifests, and what a batch of them must lead to.

A manifest starts from a valid job of a random kind and has a few fields replaced by hostile
values: out-of-range and mistyped numbers (the CRD's maxima, 2^63-1, floats, strings),
restart and clean-pod policies that do not exist, replica type names that are empty, too long
or differently cased, variables a framework injects, container ports outside 1..65535, names
too long for the pods they would give, unknown fields, odd KWOK annotations. Each manifest is
POSTed to the API server with the operator running; each must be refused by the API server
(4xx), or end with a reason (Failed with a reason and a message), or run (Running, or
Succeeded). The operator must never exit nor log a traceback, and a sentinel job created after
each batch must succeed.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.integration.operator_helpers import (
    EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    job,
    replica,
    true_conditions,
)

BIG = (5000, 5001, 100_000, 2**31, 2**53 + 1, 2**63 - 1)
INJECTED = ("DMLC_ROLE", "DMLC_NUM_WORKER", "TF_CONFIG", "SHARD_ID", "NUM_SHARDS", "RUN_ID",
            "DMLC_PS_ROOT_URI")


def base_job(kind: str, name: str, workers: int) -> dict[str, Any]:
    """A valid job whose pods end with 0 after 1 s."""
    if kind == "MxJob":
        specs = {"Scheduler": replica(kind, exit_code=0), "Server": replica(kind, exit_code=0),
                 "Worker": replica(kind, workers, exit_code=0)}
        return job(kind, name, specs)
    if kind == "TfJob":
        return job(kind, name, {"Chief": replica(kind, exit_code=0),
                                "Worker": replica(kind, workers, exit_code=0)})
    return job(kind, name, {"Worker": replica(kind, workers, exit_code=0)},
               backend={"type": "redis", "redisHost": "redis.example.invalid"})


# Plausible values come first and most often (hypothesis favours the first branches): a spec
# the API server refuses never reaches the operator, so most specs should pass the schema.
numbers = st.one_of(st.integers(0, 4), st.sampled_from(BIG), st.integers(-3, 50),
                    st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.text(max_size=6), st.none(), st.booleans())
texts = st.one_of(st.sampled_from(["Never", "OnFailure", "Always", "ExitCode", "All", "None",
                                   "Running", "worker", "ps", "x" * 60, "", " ", "A" * 300]),
                  st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,12}", fullmatch=True),
                  st.text(max_size=20))
names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
    st.from_regex(r"[a-z][a-z0-9-]{0,62}", fullmatch=True),
    st.sampled_from(["x" * 45, "x" * 63, "UPPER", "a.b", "-a"]),
)


def _mutations(kind: str) -> st.SearchStrategy[tuple[str, Any]]:
    types = {"MxJob": ["Scheduler", "Server", "Worker"], "TfJob": ["Chief", "Worker"],
             "Caffe2Job": ["Worker"]}[kind]
    rtype = st.sampled_from(types)
    return st.one_of(
        st.tuples(st.just("replicas"), st.tuples(rtype, numbers)),
        st.tuples(st.just("restartPolicy"), st.tuples(rtype, texts)),
        st.tuples(st.just("runPolicy"), st.tuples(
            st.sampled_from(["backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished",
                             "cleanPodPolicy", "suspend", "bogus"]), numbers | texts)),
        st.tuples(st.just("rename-type"), st.tuples(rtype, texts)),
        st.tuples(st.just("env"), st.tuples(rtype, st.sampled_from(INJECTED) | texts, texts)),
        st.tuples(st.just("port"), st.tuples(rtype, numbers)),
        st.tuples(st.just("container"), st.tuples(rtype, st.sampled_from(
            ["name", "image", "command", "resources"]), numbers | texts)),
        st.tuples(st.just("annotation"), st.tuples(rtype, st.sampled_from(
            [EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION]), texts)),
        st.tuples(st.just("unknown-field"), st.tuples(rtype, texts)),
        st.tuples(st.just("drop"), rtype),
    )


def _apply(manifest: dict[str, Any], mutation: tuple[str, Any]) -> None:
    what, arg = mutation
    specs = manifest["spec"]["replicaSpecs"]
    if what == "runPolicy":
        key, value = arg
        manifest["spec"].setdefault("runPolicy", {})[key] = value
        return
    if what == "drop":
        specs.pop(arg, None)
        return
    rtype, *rest = arg if isinstance(arg, tuple) else (arg,)
    spec = specs.get(rtype)
    if spec is None:
        return
    main = spec["template"]["spec"]["containers"][0]
    if what == "replicas":
        spec["replicas"] = rest[0]
    elif what == "restartPolicy":
        spec["restartPolicy"] = rest[0]
    elif what == "rename-type":
        specs[rest[0]] = specs.pop(rtype)
    elif what == "env":
        main.setdefault("env", []).append({"name": rest[0], "value": rest[1]})
    elif what == "port":
        main["ports"] = [{"name": "p", "containerPort": rest[0]}]
    elif what == "container":
        main[rest[0]] = rest[1]
    elif what == "annotation":
        spec["template"]["metadata"]["annotations"][rest[0]] = rest[1]
    elif what == "unknown-field":
        spec[f"x{len(rest[0])}"] = rest[0]


@st.composite
def hostile_job(draw: st.DrawFn) -> dict[str, Any]:
    """One hostile manifest (its name made unique by the caller)."""
    kind = draw(st.sampled_from(["MxJob", "TfJob", "Caffe2Job"]))
    name = draw(names)
    manifest = base_job(kind, name, draw(st.integers(1, 3)))
    for mutation in draw(st.lists(_mutations(kind), min_size=1, max_size=2)):
        _apply(manifest, mutation)
    return copy.deepcopy(manifest)


@dataclass
class Outcomes:
    """What the specs of a run led to."""

    refused: int = 0
    ended_with_reason: int = 0
    ran: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)

    def total(self) -> int:
        return self.refused + self.ended_with_reason + self.ran + len(self.unexplained)


def classify(status: dict[str, Any]) -> str | None:
    """"ran", "reason:<Reason>" or None (no outcome yet)."""
    true = set(true_conditions(status))
    if "Failed" in true:
        failed = next(c for c in status.get("conditions") or [] if c["type"] == "Failed")
        if failed.get("reason") and failed.get("message"):
            return f"reason:{failed['reason']}"
        return "failed-without-reason"
    if true & {"Running", "Succeeded", "Restarting", "Suspended"}:
        return "ran"
    return None


def wait_outcomes(get_status: Any, created: list[tuple[str, str]], budget: float
                  ) -> dict[tuple[str, str], str | None]:
    """Poll each created job until it has an outcome or ``budget`` seconds passed."""
    deadline = time.monotonic() + budget
    out: dict[tuple[str, str], str | None] = {key: None for key in created}
    while True:
        for key, seen in out.items():
            if seen is None:
                status = get_status(*key)
                out[key] = None if status is None else classify(status)
        if all(v is not None for v in out.values()) or time.monotonic() > deadline:
            return out
        time.sleep(1.0)
