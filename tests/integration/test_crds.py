"""The CRDs of crds/ on the real API server: they install and serve, ``kubectl explain`` and
``kubectl get trainjobs`` work, every example is accepted, and invalid jobs are refused with a
message naming the field — by the API server and by ``trainjobs.core.validation.parse_job``
alike (the operator and ``trainjobs run`` must refuse what ``kubectl apply`` refuses)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.operator_helpers import CRDS_DIR, EXAMPLES, PLURALS, Namespace, job
from trainjobs.api.models import MAX_DURATION_SECONDS, MAX_REPLICAS
from trainjobs.core.validation import parse_job
from trainjobs.errors import SpecInvalid
from trainjobs.plugin.manager import PluginManager, load_plugins
from trainjobs.testing import ControlPlane, apply_crds

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plugins() -> PluginManager:
    """The plugins the operator loads (the installed ones)."""
    return load_plugins()


def rs(container: str, replicas: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": container, "image": "x:1", **fields}]}},
    }


def valid(kind: str, name: str) -> dict[str, Any]:
    specs = {
        "MxJob": {"Scheduler": rs("mxnet"), "Server": rs("mxnet"), "Worker": rs("mxnet", 2)},
        "TfJob": {"Chief": rs("tensorflow"), "Worker": rs("tensorflow", 2)},
        "Caffe2Job": {"Worker": rs("caffe2")},
    }
    return job(kind, name, specs[kind])


def server_dry_run(ns: Namespace, manifest: dict[str, Any]) -> tuple[int, str]:
    result = ns.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(manifest),
                        check=False)
    return result.returncode, result.stdout + result.stderr


def test_crds_install_server_side_and_become_established(
    kube_cluster: ControlPlane, trainjobs_crds: list[str]
) -> None:
    assert sorted(trainjobs_crds) == sorted(f"{p}.trainjobs.io" for p in PLURALS.values())
    # Applying again (as an upgrade would) is a no-op that still succeeds.
    assert sorted(apply_crds(kube_cluster.kubeconfig, CRDS_DIR)) == sorted(trainjobs_crds)
    for name in trainjobs_crds:
        out = kube_cluster.kubectl("get", "crd", name, "-o", "json", "--show-managed-fields")
        crd = json.loads(out.stdout)
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", crd["status"]
        assert conditions.get("NamesAccepted") == "True", crd["status"]
        assert conditions.get("NonStructuralSchema") in (None, "False"), crd["status"]
        assert "trainjobs" in crd["spec"]["names"]["categories"]
        managers = {m["manager"] for m in crd["metadata"]["managedFields"]}
        assert "trainjobs-tests" in managers, "not applied server-side"
    resources = kube_cluster.kubectl("api-resources", "--api-group=trainjobs.io", "-o", "wide")
    for plural, short in (("mxjobs", "mxj"), ("tfjobs", "tfj"), ("caffe2jobs", "c2j")):
        line = next(x for x in resources.stdout.splitlines() if x.startswith(plural))
        assert short in line.split() and "trainjobs" in line, line


@pytest.mark.parametrize(
    ("resource", "fields"),
    [
        ("mxjob.spec.replicaSpecs", ["replicas", "restartPolicy", "template", "elasticPolicy"]),
        ("tfjob.spec.replicaSpecs.template.spec.containers",
         ["image", "env", "imagePullPolicy", "ports", "resources", "volumeMounts"]),
        ("caffe2job.spec.backend", ["type", "redisHost", "redisPort", "nfsPath"]),
        ("tfjob.spec.runPolicy", ["cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                                  "ttlSecondsAfterFinished", "suspend", "schedulingPolicy"]),
    ],
)
def test_kubectl_explain_describes_fields(
    kube_cluster: ControlPlane, trainjobs_crds: list[str], resource: str, fields: list[str]
) -> None:
    out = kube_cluster.kubectl("explain", resource).stdout
    assert "DESCRIPTION:" in out and "FIELDS:" in out, out
    listed = {line.split()[0] for line in out.split("FIELDS:", 1)[1].splitlines()
              if line.startswith("  ") and not line.startswith("    ") and line.strip()}
    missing = set(fields) - listed
    assert not missing, f"kubectl explain {resource} lacks {missing}:\n{out}"


def test_kubectl_explain_names_each_kinds_own_replica_types(
    kube_cluster: ControlPlane, trainjobs_crds: list[str]
) -> None:
    tf = kube_cluster.kubectl("explain", "tfjob.spec.replicaSpecs").stdout
    assert "Replica specs of a TfJob" in tf and "Evaluator (0 to 1)" in tf, tf
    assert "Scheduler" not in tf, tf
    mx = kube_cluster.kubectl("explain", "mxjob.spec.replicaSpecs").stdout
    assert "Scheduler (exactly 1)" in mx and "Chief" not in mx, mx


def test_get_trainjobs_lists_a_job_of_every_kind(bare_ns: Namespace) -> None:
    for kind in PLURALS:
        bare_ns.apply(valid(kind, f"one-{kind.lower()}"))
    names = set(bare_ns.kubectl("get", "trainjobs", "-o", "name").stdout.split())
    assert names == {f"{kind.lower()}.trainjobs.io/one-{kind.lower()}" for kind in PLURALS}, names
    table = bare_ns.kubectl("get", "trainjobs").stdout
    header = table.splitlines()[0].split()
    assert header[:2] == ["NAME", "STATE"] and "REPLICAS" in header and "AGE" in header, table
    # Short names work too.
    short = bare_ns.kubectl("get", "mxj,tfj,c2j", "-o", "name").stdout.split()
    assert len(short) == 3, short


def test_get_shows_progress_and_eta_columns_from_the_status(bare_ns: Namespace) -> None:
    """Issue 37.4: `kubectl get <kind>` shows the status.progress the operator writes (here
    written directly to the status subresource, as the operator's merge patch does)."""
    progress = {"step": 1200, "totalSteps": 5000, "percent": 24.0, "etaSeconds": 1900,
                "summary": "1200/5000 (24%)", "metrics": {"loss": 0.3121},
                "replica": "p-worker-0", "lastReportTime": "2026-01-01T00:00:00Z",
                "lastProgressTime": "2026-01-01T00:00:00Z"}
    for kind, plural in PLURALS.items():
        name = f"p-{kind.lower()}"
        bare_ns.apply(valid(kind, name))
        bare_ns.kubectl("patch", plural, name, "--subresource=status", "--type=merge", "-p",
                        json.dumps({"status": {"state": "Running", "progress": progress}}))
        table = bare_ns.kubectl("get", plural, name).stdout.splitlines()
        header = table[0].split()
        assert header[:5] == ["NAME", "STATE", "REPLICAS", "PROGRESS", "ETA"], table
        # (no operator here: REPLICAS is empty)
        assert table[1].split()[:5] == [name, "Running", "1200/5000", "(24%)", "1900"], table
        stored = json.loads(bare_ns.kubectl("get", plural, name, "-o", "json").stdout)
        assert stored["status"]["progress"] == progress
    # What a newer progress drops is sent as null (operator/status_write.py): the API server
    # merges key by key, so without the nulls the old ETA and metric would stay.
    bare_ns.kubectl("patch", "tfjobs", "p-tfjob", "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"progress": {
                        "step": 1300, "summary": "1300/5000 (26%)", "etaSeconds": None,
                        "metrics": {"loss": None, "acc": 0.5}}}}))
    stored = json.loads(bare_ns.kubectl("get", "tfjobs", "p-tfjob", "-o", "json").stdout)
    assert "etaSeconds" not in stored["status"]["progress"]
    assert stored["status"]["progress"]["metrics"] == {"acc": 0.5}
    row = bare_ns.kubectl("get", "tfjobs", "p-tfjob").stdout.splitlines()[1].split()
    # (no operator here: REPLICAS is empty, and now ETA too; AGE is last)
    assert row[:4] == ["p-tfjob", "Running", "1300/5000", "(26%)"] and len(row) == 5, row
    # A progress the schema refuses (more metrics than the status keeps) is refused.
    many = {"metrics": {f"m{i}": 1.0 for i in range(17)}, "step": 1}
    refused = bare_ns.kubectl("patch", "tfjobs", "p-tfjob", "--subresource=status",
                              "--type=merge", "-p", json.dumps({"status": {"progress": many}}),
                              check=False)
    assert refused.returncode != 0 and "must have at most 16 items" in refused.stderr, \
        refused.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_passes_server_dry_run(bare_ns: Namespace, example: Path) -> None:
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    assert docs
    result = bare_ns.kubectl("apply", "--dry-run=server", "-f", str(example), check=False)
    assert result.returncode == 0, result.stderr
    assert "(server dry run)" in result.stdout, result.stdout


def _with(kind: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    manifest = copy.deepcopy(valid(kind, name))
    change(manifest["spec"]["replicaSpecs"])
    return manifest


def _typo(specs: dict[str, Any]) -> None:
    specs["Worker"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"


def _set(key: str, replicas: int) -> Callable[[dict[str, Any]], None]:
    def change(specs: dict[str, Any]) -> None:
        specs.setdefault(key, rs("tensorflow"))["replicas"] = replicas

    return change


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda specs: specs.pop(key)


def _elastic(key: str, replicas: int, low: int, high: int) -> Callable[[dict[str, Any]], None]:
    def change(specs: dict[str, Any]) -> None:
        specs[key]["replicas"] = replicas
        specs[key]["elasticPolicy"] = {"minReplicas": low, "maxReplicas": high}

    return change


def _master_too(specs: dict[str, Any]) -> None:
    specs["Master"] = copy.deepcopy(specs["Chief"])


def _spec(kind: str, name: str, **fields: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(valid(kind, name))
    manifest["spec"].update(fields)
    return manifest


def _two_shards(name: str, **fields: Any) -> dict[str, Any]:
    manifest = _spec("Caffe2Job", name, **fields)
    manifest["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2
    return manifest


def _template_policy(policy: str, replica_policy: str | None = None
                     ) -> Callable[[dict[str, Any]], None]:
    def change(specs: dict[str, Any]) -> None:
        specs["Worker"]["template"]["spec"]["restartPolicy"] = policy
        if replica_policy is not None:
            specs["Worker"]["restartPolicy"] = replica_policy

    return change


def _ps_only(specs: dict[str, Any]) -> None:
    specs.clear()
    specs["PS"] = rs("tensorflow")


# (id, manifest, what the API server's message must contain, the field parse_job names)
INVALID = [
    ("tfjob-only-ps", _with("TfJob", "only-ps", _ps_only),
     "needs a Chief (or Master) or at least one Worker", "spec.replicaSpecs"),
    ("tfjob-tensorboard-name-too-long",
     _spec("TfJob", "t" * 52, tensorboard={"logDir": "/logs"}),
     "at most 51 characters with spec.tensorboard", "metadata.name"),
    ("caffe2-none-backend-two-shards", _two_shards("none-two", backend={"type": "none"}),
     "'none' cannot connect more than one shard", "spec.backend.type"),
    ("caffe2-nfs-without-path", _spec("Caffe2Job", "nfs-nopath", backend={"type": "nfs"}),
     "nfsPath is required", "spec.backend.nfsPath"),
    ("unknown-pod-field", _with("TfJob", "typo", _typo),
     'unknown field "spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy"',
     "spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy"),
    ("two-chiefs", _with("TfJob", "two-chiefs", _set("Chief", 2)),
     "replicaSpecs.Chief.replicas", "spec.replicaSpecs.Chief.replicas"),
    ("chief-and-master", _with("TfJob", "chief-master", _master_too),
     "Chief and Master", "spec.replicaSpecs.Master"),
    ("mxjob-without-scheduler", _with("MxJob", "no-scheduler", _drop("Scheduler")),
     "Scheduler", "spec.replicaSpecs.Scheduler"),
    ("zero-mxnet-workers", _with("MxJob", "no-workers", _set("Worker", 0)),
     "replicaSpecs.Worker.replicas", "spec.replicaSpecs.Worker.replicas"),
    ("name-too-long", valid("Caffe2Job", "n" * 60),
     "metadata.name is too long", "metadata.name"),
    ("name-too-long-mxjob", valid("MxJob", "m" * 52),
     "metadata.name is too long", "metadata.name"),
    ("negative-replicas", _with("TfJob", "negative", _set("Worker", -1)),
     "spec.replicaSpecs.Worker.replicas", "spec.replicaSpecs.Worker.replicas"),
    ("worker-without-template", _with("TfJob", "no-template", lambda s: s["Worker"].pop(
        "template")), "replicaSpecs.Worker.template is required",
     "spec.replicaSpecs.Worker.template"),
    ("template-restart-policy-tfjob", _with("TfJob", "tpl-onfailure", _template_policy(
        "OnFailure")), "spec.replicaSpecs[Worker].template.spec.restartPolicy: Invalid value",
     "spec.replicaSpecs.Worker.template.spec.restartPolicy"),
    ("template-restart-policy-caffe2", _with("Caffe2Job", "c2-onfailure", _template_policy(
        "OnFailure", "OnFailure")), "its replicas restart together",
     "spec.replicaSpecs.Worker.template.spec.restartPolicy"),
    # Bounds that keep one job from exhausting the operator (issue 15.1, 15.2, 15.7).
    ("replicas-over-maximum", _with("MxJob", "million", _set("Worker", 1_000_000)),
     f"less than or equal to {MAX_REPLICAS}", "spec.replicaSpecs.Worker.replicas"),
    ("replicas-sum-over-maximum",
     _with("TfJob", "sum", lambda s: s.update(Worker=rs("tensorflow", 3000),
                                              PS=rs("tensorflow", 3000))),
     f"at most {MAX_REPLICAS} per job", "spec.replicaSpecs"),
    ("negative-container-port",
     _with("TfJob", "port", lambda s: s["Worker"]["template"]["spec"]["containers"][0]
           .update(ports=[{"name": "tfjob-port", "containerPort": -1}])),
     "containerPort", "spec.replicaSpecs.Worker.template.spec.containers[0].ports[0]"
                      ".containerPort"),
    ("container-port-over-65535",
     _with("TfJob", "port-high", lambda s: s["Worker"]["template"]["spec"]["containers"][0]
           .update(ports=[{"containerPort": 65536}])),
     "containerPort", "spec.replicaSpecs.Worker.template.spec.containers[0].ports[0]"
                      ".containerPort"),
    ("deadline-beyond-dates", _spec("TfJob", "deadline",
                                    runPolicy={"activeDeadlineSeconds": 2**63 - 1}),
     "activeDeadlineSeconds", "spec.runPolicy.activeDeadlineSeconds"),
    ("ttl-beyond-dates", _spec("TfJob", "ttl", runPolicy={"ttlSecondsAfterFinished": 2**40}),
     "ttlSecondsAfterFinished", "spec.runPolicy.ttlSecondsAfterFinished"),
    # elasticPolicy bounds and where it is allowed (issue 14.1).
    ("elastic-replicas-over-max", _with("MxJob", "el-max", _elastic("Worker", 9, 1, 4)),
     "elasticPolicy needs minReplicas <= replicas <= maxReplicas",
     "spec.replicaSpecs.Worker.replicas"),
    ("elastic-min-over-max", _with("MxJob", "el-min", _elastic("Worker", 4, 5, 4)),
     "elasticPolicy needs minReplicas <= replicas <= maxReplicas",
     "spec.replicaSpecs.Worker.elasticPolicy.minReplicas"),
    ("elastic-on-a-server", _with("MxJob", "el-server", _elastic("Server", 1, 1, 2)),
     "a MxJob allows elasticPolicy only on Worker", "spec.replicaSpecs.Server.elasticPolicy"),
    ("elastic-on-a-chief", _with("TfJob", "el-chief", _elastic("Chief", 1, 1, 1)),
     "a TfJob allows elasticPolicy only on Worker", "spec.replicaSpecs.Chief.elasticPolicy"),
]


@pytest.mark.parametrize(("manifest", "api_says", "field"), [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid_job_is_refused_by_the_api_server_and_parse_job(
    bare_ns: Namespace,
    plugins: PluginManager,
    manifest: dict[str, Any],
    api_says: str,
    field: str,
) -> None:
    code, out = server_dry_run(bare_ns, manifest)
    assert code != 0, f"the API server accepted an invalid job:\n{out}"
    assert api_says in out, out
    assert "is invalid" in out or "strict decoding error" in out, out
    with pytest.raises(SpecInvalid) as refused:
        parse_job(copy.deepcopy(manifest), plugins)
    paths = [e.path for e in refused.value.errors]
    assert field in paths, refused.value.summary()
    # Nothing was created.
    kind = manifest["kind"]
    assert bare_ns.job(kind, manifest["metadata"]["name"]) is None


@pytest.mark.parametrize(
    "manifest",
    [valid("Caffe2Job", "c" * 54), valid("MxJob", "m" * 51), valid("TfJob", "t" * 54),
     _with("TfJob", "master-only", lambda s: s.update(Master=s.pop("Chief"))),
     _spec("TfJob", "t" * 51, tensorboard={"logDir": "/logs"}),
     _with("TfJob", "workers-and-ps", lambda s: s.update(PS=s.pop("Chief"))),
     _with("TfJob", "tpl-same-policy", _template_policy("OnFailure", "OnFailure")),
     _with("Caffe2Job", "c2-tpl-never", _template_policy("Never", "OnFailure")),
     _spec("TfJob", "seed-ps", tfImage="tensorflow/tensorflow:2.20.0",
           replicaSpecs={"Master": rs("tensorflow"), "Worker": rs("tensorflow"),
                         "PS": {"replicas": 2}})],
    ids=["caffe2-54-chars", "mxjob-51-chars", "tfjob-54-chars", "tfjob-master",
         "tfjob-tensorboard-51-chars", "tfjob-workers-and-ps", "tfjob-template-policy-same",
         "caffe2-template-never", "tfjob-ps-without-template"],
)
def test_limits_accepted_by_both(
    bare_ns: Namespace, plugins: PluginManager, manifest: dict[str, Any]
) -> None:
    """The boundaries of the refusals above are accepted by both (no off-by-one)."""
    code, out = server_dry_run(bare_ns, manifest)
    assert code == 0, out
    parse_job(copy.deepcopy(manifest), plugins)


def test_a_float_replica_count_is_refused_for_what_it_is(
    bare_ns: Namespace, plugins: PluginManager
) -> None:
    """`replicas: 1000000.0` was refused with the name-length rule's message (a CEL rule doing
    arithmetic on a value the schema should have refused): the refusal must be about the
    number, and no rule may misattribute it."""
    manifest = _with("MxJob", "floaty", lambda s: s["Worker"].update(replicas=1000000.0))
    code, out = server_dry_run(bare_ns, manifest)
    assert code != 0, out
    assert "spec.replicaSpecs.Worker.replicas" in out, out
    assert "too long" not in out and "per job" not in out, out
    with pytest.raises(SpecInvalid) as refused:
        parse_job(copy.deepcopy(manifest), plugins)
    assert [e.path for e in refused.value.errors] == ["spec.replicaSpecs.Worker.replicas"]


def test_replica_maximum_is_accepted_by_both(bare_ns: Namespace, plugins: PluginManager) -> None:
    """The maxima themselves are accepted (no off-by-one): one type at the maximum."""
    manifest = _with("Caffe2Job", "c2", lambda s: s["Worker"].update(replicas=MAX_REPLICAS))
    manifest["spec"]["backend"] = {"type": "redis", "redisHost": "redis"}
    code, out = server_dry_run(bare_ns, manifest)
    assert code == 0, out
    deadline = _spec("TfJob", "far", runPolicy={"activeDeadlineSeconds": MAX_DURATION_SECONDS,
                                                "ttlSecondsAfterFinished": MAX_DURATION_SECONDS})
    code, out = server_dry_run(bare_ns, deadline)
    assert code == 0, out
    parse_job(copy.deepcopy(deadline), plugins)
