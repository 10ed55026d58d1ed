"""spec.managedBy on the real API server (issue 26.1): the CRDs refuse any manager but this
operator and MultiKueue, and refuse setting, changing or removing it after creation with the
rule's message; a running operator gives a job managed by MultiKueue nothing (no pod, Service
or status), also once it is unsuspended, and says so once in its log, while a job of its own
beside it runs."""

from __future__ import annotations

import json

import pytest

from tests.integration.operator_helpers import Namespace, Operators, job, replica, wait_for
from trainjobs.api.models import MANAGED_BY_MULTIKUEUE, MANAGED_BY_OPERATOR

pytestmark = pytest.mark.integration

IMMUTABLE = "spec.managedBy is immutable: it cannot be set, changed or removed"


def _patch(ns: Namespace, name: str, patch: dict[str, object]) -> str:
    """A merge patch of TfJob `name`; the API server's answer when it refuses it, else ""."""
    out = ns.kubectl("patch", f"tfjobs.trainjobs.io/{name}", "--type=merge", "-p",
                     json.dumps(patch), check=False)
    return out.stderr if out.returncode else ""


def test_managed_by_is_enumerated_and_immutable(bare_ns: Namespace) -> None:
    other = job("TfJob", "other", {"Worker": replica("TfJob")},
                managedBy="example.com/operator")
    out = bare_ns.kubectl("create", "-f", "-", input=json.dumps(other), check=False)
    assert out.returncode != 0
    assert "spec.managedBy: Unsupported value: \"example.com/operator\"" in out.stderr, out.stderr

    bare_ns.create(job("TfJob", "multi", {"Worker": replica("TfJob")},
                       managedBy=MANAGED_BY_MULTIKUEUE, runPolicy={"suspend": True}))
    bare_ns.create(job("TfJob", "plain", {"Worker": replica("TfJob")},
                       runPolicy={"suspend": True}))
    assert IMMUTABLE in _patch(bare_ns, "multi", {"spec": {"managedBy": MANAGED_BY_OPERATOR}})
    assert IMMUTABLE in _patch(bare_ns, "multi", {"spec": {"managedBy": None}})
    assert IMMUTABLE in _patch(bare_ns, "plain", {"spec": {"managedBy": MANAGED_BY_MULTIKUEUE}})
    # Everything else stays editable, and the stored value is what was written.
    assert _patch(bare_ns, "multi", {"spec": {"runPolicy": {"suspend": False}}}) == ""
    stored = bare_ns.job("TfJob", "multi")
    assert stored is not None and stored["spec"]["managedBy"] == MANAGED_BY_MULTIKUEUE


def test_the_operator_leaves_a_multikueue_job_alone(bare_ns: Namespace,
                                                    operators: Operators) -> None:
    op = operators.start()
    bare_ns.create(job("TfJob", "away", {"Worker": replica("TfJob", 2)},
                       managedBy=MANAGED_BY_MULTIKUEUE, runPolicy={"suspend": True}))
    bare_ns.patch_job("TfJob", "away", {"spec": {"runPolicy": {"suspend": False}}})
    # A job of its own, created after: once it runs, the operator has seen both.
    bare_ns.create(job("TfJob", "mine", {"Worker": replica("TfJob", 1)}))
    bare_ns.wait_state("TfJob", "mine", "Running")
    wait_for(lambda: op.logged("is managed by kueue.x-k8s.io/multikueue"),
             "the operator to say it leaves the job alone")
    assert bare_ns.pods("away") == []
    assert bare_ns.services("away") == []
    assert bare_ns.status("TfJob", "away") == {}
    assert [r["msg"] for r in op.logged("is managed by")] == [
        f"TfJob/{bare_ns.name}/away is managed by {MANAGED_BY_MULTIKUEUE} (spec.managedBy): "
        "this operator leaves it alone"]
    assert not [e for e in bare_ns.events("away")]
