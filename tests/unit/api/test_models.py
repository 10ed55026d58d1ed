"""The job models and validation: pod templates survive parse, dump and render exactly; every
mistake is refused with the exact field path.

The property test generates valid core/v1 pod templates (containers with env, ports,
resources, mounts, security contexts; volumes, tolerations, node selectors, labels...), puts
one in a job of each kind and checks that nothing the user wrote is lost or changed, except
the documented additions of rendering: the injected environment (prepended), the framework
port (appended to the framework container) and the pod's restartPolicy.
"""

from __future__ import annotations

import copy
import string
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.helpers import (
    Doc,
    caffe2job,
    container,
    errors_of,
    framework_of,
    mxjob,
    parse,
    render,
    replica,
    template,
    tfjob,
)
from trainjobs.api.models import Job, ReplicaSpec, RestartPolicy, RunPolicy
from trainjobs.core.render import (
    ANNOTATION_ATTEMPT,
    POD_RESTART_POLICY,
    pod_restart_policy,
    replica_counts,
)
from trainjobs.errors import SpecError, SpecInvalid

# Strategies: valid pieces of a core/v1 PodTemplateSpec ---------------------------------------

LOWER, DIGITS, UPPER = string.ascii_lowercase, string.digits, string.ascii_uppercase
DNS_LABEL = st.builds(  # a DNS-1123/1035 label: starts with a letter, no trailing '-'
    lambda first, rest, tail: first + (f"{rest}-{tail}" if tail else rest),
    st.sampled_from(LOWER), st.text(LOWER + DIGITS, max_size=5), st.text(LOWER + DIGITS,
                                                                         max_size=3))
PORT_NAME = st.text(LOWER, min_size=1, max_size=6)  # IANA_SVC_NAME, kept simple
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
LABEL_VALUE = st.text(LOWER + UPPER + DIGITS, max_size=10)
LABEL_KEY = st.builds(lambda prefix, name: prefix + name,
                      st.sampled_from(["", "example.com/", "team.io/"]), DNS_LABEL)
QUANTITY = st.one_of(
    st.integers(min_value=0, max_value=64),
    st.sampled_from(["500m", "1", "2", "1.5", "128Mi", "2Gi", "100M", "1e3"]),
)
RESOURCE_NAME = st.sampled_from(["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"])
# Names of user variables never collide with the injected ones (DMLC_*, TF_CONFIG, ...).
ENV_NAME = st.builds(lambda rest: "USER_" + rest, st.text(UPPER + DIGITS + "_", max_size=8))
FIELD_PATH = st.sampled_from(["metadata.name", "metadata.namespace", "status.podIP",
                              "spec.nodeName", "metadata.labels['app']"])

ENV_VAR_VALUE = st.fixed_dictionaries({}, optional={"value": TEXT})
ENV_VAR_FROM = st.fixed_dictionaries({"valueFrom": st.fixed_dictionaries(
    {"fieldRef": st.fixed_dictionaries({"fieldPath": FIELD_PATH},
                                       optional={"apiVersion": st.just("v1")})})})

RESOURCES = st.fixed_dictionaries({}, optional={
    "limits": st.dictionaries(RESOURCE_NAME, QUANTITY, max_size=3),
    "requests": st.dictionaries(RESOURCE_NAME, QUANTITY, max_size=3),
})
CONTAINER_SECURITY = st.fixed_dictionaries({}, optional={
    "runAsUser": st.integers(0, 65535),
    "runAsNonRoot": st.booleans(),
    "privileged": st.booleans(),
    "allowPrivilegeEscalation": st.booleans(),
    "readOnlyRootFilesystem": st.booleans(),
    "capabilities": st.fixed_dictionaries({}, optional={
        "add": st.lists(st.sampled_from(["NET_ADMIN", "SYS_PTRACE", "IPC_LOCK"]), max_size=2),
        "drop": st.just(["ALL"]),
    }),
})
POD_SECURITY = st.fixed_dictionaries({}, optional={
    "runAsUser": st.integers(0, 65535),
    "runAsGroup": st.integers(0, 65535),
    "fsGroup": st.integers(0, 65535),
    "runAsNonRoot": st.booleans(),
    "supplementalGroups": st.lists(st.integers(0, 65535), max_size=2),
})
TOLERATION = st.fixed_dictionaries({}, optional={
    "key": LABEL_KEY,
    "operator": st.sampled_from(["Equal", "Exists"]),
    "value": LABEL_VALUE,
    "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    "tolerationSeconds": st.integers(0, 3600),
})


def volume_source(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries({"emptyDir": st.fixed_dictionaries({}, optional={
            "medium": st.sampled_from(["", "Memory"]),
            "sizeLimit": st.one_of(st.sampled_from(["1Gi", "500Mi"]), st.integers(1, 10**9)),
        })}),
        st.fixed_dictionaries({"hostPath": st.fixed_dictionaries(
            {"path": st.just(f"/data/{name}")},
            optional={"type": st.sampled_from(["", "Directory", "DirectoryOrCreate", "File"])})}),
        st.fixed_dictionaries({"configMap": st.fixed_dictionaries({"name": DNS_LABEL}, optional={
            "items": st.lists(st.fixed_dictionaries({"key": DNS_LABEL, "path": DNS_LABEL}),
                              max_size=2),
            "defaultMode": st.sampled_from([0o644, 0o400, 420]),
            "optional": st.booleans(),
        })}),
    ).map(lambda source: {"name": name, **source})


@st.composite
def containers_of_template(draw: st.DrawFn, framework_container: str,
                           volumes: list[str]) -> list[dict[str, Any]]:
    names = draw(st.lists(DNS_LABEL.filter(lambda n: n != framework_container),
                          max_size=2, unique=True))
    out = []
    for name in [framework_container, *names]:
        c: dict[str, Any] = {"name": name}
        optional: dict[str, st.SearchStrategy[Any]] = {
            "image": st.sampled_from(["busybox:1.36", "example.invalid/trainer:1.0",
                                      "registry.local:5000/x/y@sha256:" + "a" * 64]),
            "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
            "command": st.lists(TEXT, max_size=3),
            "args": st.lists(TEXT, max_size=3),
            "workingDir": st.sampled_from(["/", "/work", "/home/user"]),
            "resources": RESOURCES,
            "securityContext": CONTAINER_SECURITY,
            "tty": st.booleans(),
            "stdin": st.booleans(),
        }
        for key, strategy in optional.items():
            if draw(st.booleans()):
                c[key] = draw(strategy)
        env_names = draw(st.lists(ENV_NAME, max_size=4, unique=True))
        if env_names:
            c["env"] = [{"name": n, **draw(st.one_of(ENV_VAR_VALUE, ENV_VAR_FROM))}
                        for n in env_names]
        port_names = draw(st.lists(PORT_NAME, max_size=3, unique=True))
        if port_names:
            c["ports"] = [draw(st.fixed_dictionaries(
                {"name": st.just(n), "containerPort": st.integers(1, 65535)},
                optional={"protocol": st.sampled_from(["TCP", "UDP", "SCTP"])},
            )) for n in port_names]
        if draw(st.booleans()) and volumes:
            mounted = draw(st.lists(st.sampled_from(volumes), min_size=1, unique=True))
            c["volumeMounts"] = [draw(st.fixed_dictionaries(
                {"name": st.just(v), "mountPath": st.just(f"/mnt/{v}")},
                optional={"readOnly": st.booleans(), "subPath": DNS_LABEL},
            )) for v in mounted]
        out.append(c)
    return out


@st.composite
def pod_templates(draw: st.DrawFn, framework_container: str,
                  framework_port_name: str) -> dict[str, Any]:
    volume_names = draw(st.lists(DNS_LABEL, max_size=3, unique=True))
    spec: dict[str, Any] = {
        "containers": draw(containers_of_template(framework_container, volume_names)),
    }
    if volume_names:
        spec["volumes"] = [draw(volume_source(n)) for n in volume_names]
    if draw(st.booleans()):
        # The user may name the framework port themselves; rendering then adds none.
        fw = spec["containers"][0]
        fw["ports"] = [p for p in fw.get("ports", []) if p["name"] != framework_port_name]
        fw["ports"].append({"name": framework_port_name,
                            "containerPort": draw(st.integers(1024, 65535))})
    optional: dict[str, st.SearchStrategy[Any]] = {
        "nodeSelector": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=3),
        "tolerations": st.lists(TOLERATION, max_size=2),
        "securityContext": POD_SECURITY,
        "serviceAccountName": DNS_LABEL,
        "priorityClassName": DNS_LABEL,
        "schedulerName": st.sampled_from(["default-scheduler", "volcano"]),
        "terminationGracePeriodSeconds": st.integers(0, 600),
        "hostNetwork": st.booleans(),
        "dnsPolicy": st.sampled_from(["ClusterFirst", "Default", "None"]),
        "imagePullSecrets": st.lists(st.fixed_dictionaries({"name": DNS_LABEL}), max_size=2),
        "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never"]),
        "initContainers": st.just([{"name": "init-data", "image": "busybox:1.36",
                                    "command": ["sh", "-c", "true"]}]),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    tmpl: dict[str, Any] = {"spec": spec}
    meta = draw(st.fixed_dictionaries({}, optional={
        "labels": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=3),
        "annotations": st.dictionaries(LABEL_KEY, TEXT, max_size=3),
    }))
    if draw(st.booleans()) or meta:
        tmpl["metadata"] = meta
    return tmpl


# Which replica types the generated template may go into, and the other replica specs the job
# needs around it (each a minimal valid template).
KIND_SETUP: dict[str, tuple[list[str], dict[str, int]]] = {
    "MxJob": (["Scheduler", "Server", "Worker"], {"Scheduler": 1, "Server": 1, "Worker": 1}),
    "TfJob": (["Chief", "Master", "Worker", "PS", "Evaluator"], {"Worker": 1}),
    "Caffe2Job": (["Worker"], {"Worker": 1}),
}


@st.composite
def jobs_with_template(draw: st.DrawFn, kind: str) -> tuple[Doc, str, dict[str, Any]]:
    framework = framework_of(kind)
    keys, others = KIND_SETUP[kind]
    key = draw(st.sampled_from(keys))
    rtype = framework.replica_type(key)
    assert rtype is not None
    most = min(rtype.max_replicas or 3, 3)
    tmpl = draw(pod_templates(framework.container_name, framework.port_name))
    specs: dict[str, Any] = {k: replica(n, template(container(framework.container_name)))
                             for k, n in others.items()}
    specs[key] = {"replicas": draw(st.integers(max(rtype.min_replicas, 1), most)),
                  "restartPolicy": draw(st.sampled_from([p.value for p in RestartPolicy])),
                  "template": tmpl}
    fw = tmpl["spec"]["containers"][0]
    if tmpl["spec"].get("hostNetwork") and rtype.listens and not any(
            p["name"] == framework.port_name for p in fw.get("ports", [])):
        # Under hostNetwork the user names the port (test_host_network.py).
        fw["ports"] = [*fw.get("ports", []), {"name": framework.port_name,
                                              "containerPort": 4000}]
    if "restartPolicy" in tmpl["spec"]:
        # Only the pods' own policy is accepted there (test_template_restart_policy.py).
        tmpl["spec"]["restartPolicy"] = pod_restart_policy(
            RestartPolicy(specs[key]["restartPolicy"]), framework)
    doc = {"apiVersion": "trainjobs.io/v1alpha1", "kind": kind,
           "metadata": {"name": draw(DNS_LABEL), "namespace": "team-a"},
           "spec": {"replicaSpecs": specs}}
    return doc, key, copy.deepcopy(tmpl)


def check_rendered_pod(pod: dict[str, Any], original: dict[str, Any], job: Job,
                       restart_policy: RestartPolicy) -> None:
    """Everything of `original` is in `pod` unchanged, but for the documented additions."""
    framework = framework_of(job.kind)
    # TensorFlow's contract: no TF_CONFIG at all for a single-replica job.
    no_env = job.kind == "TfJob" and sum(r.replicas for r in job.spec.replica_specs.values()) < 2
    spec, orig_spec = pod["spec"], original["spec"]
    assert set(spec) == set(orig_spec) | {"restartPolicy"}
    for key, value in orig_spec.items():
        if key not in ("containers", "restartPolicy"):
            assert spec[key] == value, key
    together = framework.replicas_restart_together
    type_lower = pod["metadata"]["labels"]["trainjobs.io/replica-type"]
    listens = next(t.listens for t in framework.replica_types
                   if type_lower in {n.lower() for n in t.names})
    # Replicas that restart together are never restarted in place (the planner restarts all).
    assert spec["restartPolicy"] == ("Never" if together else POD_RESTART_POLICY[restart_policy])

    meta = original.get("metadata", {})
    labels = pod["metadata"]["labels"]
    assert labels.items() >= meta.get("labels", {}).items()
    attempt = {ANNOTATION_ATTEMPT: str(job.status.attempt)} if together else {}
    annotations = dict(pod["metadata"].get("annotations", {}))
    assert annotations.pop("trainjobs.io/replicas") == replica_counts(job)
    assert annotations == {**meta.get("annotations", {}), **attempt}

    assert [c["name"] for c in spec["containers"]] == [c["name"] for c in orig_spec["containers"]]
    for new, old in zip(spec["containers"], orig_spec["containers"], strict=True):
        assert set(new) - set(old) <= {"env", "ports"}
        for key, value in old.items():
            if key not in ("env", "ports"):
                assert new[key] == value, (new["name"], key)
        receives_env = framework.env_in_all_containers or old["name"] == framework.container_name
        old_env = old.get("env", [])
        new_env = new.get("env", [])
        injected = new_env[:len(new_env) - len(old_env)]
        assert new_env[len(injected):] == old_env, "user variables must follow, unchanged"
        if receives_env and not no_env:
            assert injected, f"no environment injected into {old['name']}"
        else:
            assert new.get("env") == old.get("env"), f"{old['name']} must get no environment"
        for var in injected:
            assert set(var) == {"name", "value"} and isinstance(var["value"], str)
            assert not var["name"].startswith("USER_")

        old_ports = old.get("ports", [])
        if old["name"] == framework.container_name and listens and not any(
                p["name"] == framework.port_name for p in old_ports):
            assert new["ports"] == [*old_ports, {"name": framework.port_name,
                                                 "containerPort": framework.default_port}]
        else:
            assert new.get("ports") == old.get("ports")


@pytest.mark.parametrize("kind", sorted(KIND_SETUP))
@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_pod_template_round_trips_and_renders_unchanged(kind: str, data: st.DataObject) -> None:
    doc, key, original = data.draw(jobs_with_template(kind))
    job = parse(doc)

    rspec = job.spec.replica_specs[key]
    assert rspec.template == original
    api = job.to_api()
    assert api["spec"]["replicaSpecs"][key]["template"] == original
    # What the API writes parses back to the same job (e.g. the operator re-reading it).
    assert parse(api) == job
    # And survives YAML, as in a file given to `trainjobs run`.
    text = yaml.dump(api, Dumper=yaml.CSafeDumper)
    assert parse(yaml.load(text, Loader=yaml.CSafeLoader)).spec == job.spec

    rendered = render(job)
    pods = [p for name, p in rendered.pods.items() if rendered.replicas[name].type == key]
    assert len(pods) == rspec.replicas
    for pod in pods:
        check_rendered_pod(pod, original, job, rspec.restart_policy)
    # Rendering never changes the job it renders.
    assert job.spec.replica_specs[key].template == original


def test_to_api_leaves_out_unset_fields_and_keeps_defaults_explicit() -> None:
    job = parse(mxjob())
    api = job.to_api()
    assert api["apiVersion"] == "trainjobs.io/v1alpha1"
    assert api["kind"] == "MxJob"
    assert api["metadata"] == {"name": "mx"}
    assert api["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 6,
                                        "suspend": False}
    assert api["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] == "Never"
    assert "elasticPolicy" not in api["spec"]["replicaSpecs"]["Worker"]


def test_models_accept_camel_case_and_python_names() -> None:
    policy = RunPolicy.model_validate({"backoffLimit": 2, "activeDeadlineSeconds": 10})
    assert policy.backoff_limit == 2 and policy.active_deadline_seconds == 10
    assert RunPolicy(backoff_limit=2) == RunPolicy.model_validate({"backoffLimit": 2})
    rspec = ReplicaSpec.model_validate({"template": {}, "restartPolicy": "ExitCode"})
    assert rspec.replicas == 1 and rspec.restart_policy is RestartPolicy.EXIT_CODE


def test_job_key_and_namespace_default() -> None:
    job = parse(mxjob(name="keyed"))
    assert isinstance(job, Job)
    assert (job.name, job.namespace, job.key) == ("keyed", "default", "default/keyed")


# Refusals, each naming the exact field path ----------------------------------------------------

W = "spec.replicaSpecs.Worker"
WT = f"{W}.template.spec"


def _set(path: list[str | int], value: Any) -> Any:
    def mutate(doc: Doc) -> None:
        node: Any = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return mutate


def _worker(*path: str | int) -> list[str | int]:
    return ["spec", "replicaSpecs", "Worker", *path]


def _worker_container(*path: str | int) -> list[str | int]:
    return _worker("template", "spec", "containers", 0, *path)


REFUSED: list[tuple[str, Any, str, str]] = [
    # (id, mutation of an MxJob, path, words of the message)
    ("spec-unknown", _set(["spec", "replicaSpec"], {}), "spec.replicaSpec", "unknown field"),
    ("runpolicy-unknown", _set(["spec", "runPolicy"], {"backofLimit": 1}),
     "spec.runPolicy.backofLimit", "unknown field"),
    ("schedulingpolicy-unknown",
     _set(["spec", "runPolicy"], {"schedulingPolicy": {"minAvailible": 2}}),
     "spec.runPolicy.schedulingPolicy.minAvailible", "unknown field"),
    ("replicaspec-unknown", _set(_worker("replica"), 3), f"{W}.replica", "unknown field"),
    ("elastic-unknown", _set(_worker("elasticPolicy"), {"minReplicas": 1, "maxReplicas": 2,
                                                        "min": 1}),
     f"{W}.elasticPolicy.min", "unknown field"),
    ("container-unknown", _set(_worker_container("imagePullPolicyy"), "Always"),
     f"{WT}.containers[0].imagePullPolicyy", "unknown field"),
    ("pod-security-unknown", _set(_worker("template", "spec", "securityContext"),
                                  {"runAsUserr": 1000}),
     f"{WT}.securityContext.runAsUserr", "unknown field"),
    ("container-security-unknown", _set(_worker_container("securityContext"),
                                        {"runAsUser": 1, "runAsUserr": 1000}),
     f"{WT}.containers[0].securityContext.runAsUserr", "unknown field"),
    ("volume-unknown", _set(_worker("template", "spec", "volumes"),
                            [{"name": "v", "hostPath": {"path": "/x", "typ": "File"}}]),
     f"{WT}.volumes[0].hostPath.typ", "unknown field"),
    ("template-metadata-unknown", _set(_worker("template", "metadata"), {"lables": {}}),
     f"{W}.template.metadata.lables", "unknown field"),
    ("template-unknown", _set(_worker("template", "spek"), {}), f"{W}.template.spek",
     "unknown field"),
    ("replicas-word", _set(_worker("replicas"), "three"), f"{W}.replicas", "integer"),
    ("replicas-numeric-string", _set(_worker("replicas"), "3"), f"{W}.replicas", "integer"),
    ("replicas-bool", _set(_worker("replicas"), True), f"{W}.replicas", "integer"),
    ("replicas-negative", _set(_worker("replicas"), -1), f"{W}.replicas", "must be at least 0"),
    ("suspend-string", _set(["spec", "runPolicy"], {"suspend": "yes"}),
     "spec.runPolicy.suspend", "expected true or false, got a string"),
    ("container-port-string", _set(_worker_container("ports"), [{"containerPort": "http"}]),
     f"{WT}.containers[0].ports[0].containerPort", "expected integer, got str"),
    ("backoff-negative", _set(["spec", "runPolicy"], {"backoffLimit": -1}),
     "spec.runPolicy.backoffLimit", "must be at least 0, got -1"),
    ("deadline-zero", _set(["spec", "runPolicy"], {"activeDeadlineSeconds": 0}),
     "spec.runPolicy.activeDeadlineSeconds", "must be at least 1, got 0"),
    ("restart-policy", _set(_worker("restartPolicy"), "Sometimes"), f"{W}.restartPolicy",
     "ExitCode"),
    ("clean-pod-policy", _set(["spec", "runPolicy"], {"cleanPodPolicy": "Some"}),
     "spec.runPolicy.cleanPodPolicy", "Running"),
    ("env-without-name", _set(_worker_container("env"), [{"value": "x"}]),
     f"{WT}.containers[0].env[0].name", "required"),
    ("quantity-float", _set(_worker_container("resources"), {"limits": {"cpu": 1.5}}),
     f"{WT}.containers[0].resources.limits.cpu", ""),
    ("pull-policy-type", _set(_worker_container("imagePullPolicy"), 3),
     f"{WT}.containers[0].imagePullPolicy", "expected string, got int"),
    ("no-template", _set(_worker("template"), None), f"{W}.template", ""),
    ("template-without-spec", _set(_worker("template"), {"metadata": {}}), f"{W}.template.spec",
     "required"),
    ("container-without-name", _set(_worker("template", "spec", "containers"), [{"image": "x"}]),
     f"{WT}.containers[0].name", "required"),
    ("unknown-replica-type", _set(["spec", "replicaSpecs", "Workers"],
                                  replica(1, template(container("mxnet")))),
     "spec.replicaSpecs.Workers", "unknown replica type"),
    ("two-schedulers", _set(["spec", "replicaSpecs", "Scheduler", "replicas"], 2),
     "spec.replicaSpecs.Scheduler.replicas", "at most 1"),
    ("no-workers", _set(["spec", "replicaSpecs", "Worker", "replicas"], 0), f"{W}.replicas",
     "at least 1"),
    ("name-not-dns", _set(["metadata", "name"], "My_Job"), "metadata.name", "DNS-1035"),
    ("name-too-long", _set(["metadata", "name"], "j" * 60), "metadata.name", "too long"),
    ("no-name", _set(["metadata"], {}), "metadata.name", "required"),
    ("api-version", _set(["apiVersion"], "kubeflow.org/v1"), "apiVersion", "trainjobs.io/v1alpha1"),
    ("env-collision", _set(_worker_container("env"), [{"name": "DMLC_ROLE", "value": "server"}]),
     f"{WT}.containers[0].env", "DMLC_ROLE is set by trainjobs"),
]


@pytest.mark.parametrize(("mutate", "path", "words"),
                         [pytest.param(m, p, w, id=i) for i, m, p, w in REFUSED])
def test_refused_with_the_field_path(mutate: Any, path: str, words: str) -> None:
    doc = mxjob()
    mutate(doc)
    errors = errors_of(doc)
    assert path in errors, f"expected an error at {path}, got {errors}"
    assert words in errors[path], errors[path]


def test_unknown_top_level_field_is_refused() -> None:
    doc = mxjob()
    doc["spek"] = {"replicaSpecs": {}}
    assert "spek" in errors_of(doc)


@pytest.mark.parametrize(("doc", "path", "words"), [
    pytest.param(tfjob(Chief=2, Worker=1), "spec.replicaSpecs.Chief.replicas", "at most 1",
                 id="two-chiefs"),
    pytest.param(tfjob(Chief=1, Master=1), "spec.replicaSpecs.Master", "same replica type",
                 id="chief-and-master"),
    pytest.param(tfjob(PS=1), "spec.replicaSpecs", "Chief (or Master) or at least one Worker",
                 id="no-chief-no-worker"),
    pytest.param(tfjob(Worker=2, Evaluator=2), "spec.replicaSpecs.Evaluator.replicas",
                 "at most 1", id="two-evaluators"),
    pytest.param({**tfjob(Worker=2), "spec": {**tfjob(Worker=2)["spec"], "successPolicy": "Any"}},
                 "spec.successPolicy", "AllWorkers", id="success-policy"),
    pytest.param({**tfjob(Worker=2), "spec": {**tfjob(Worker=2)["spec"],
                                               "tensorboard": {"logdir": "/x"}}},
                 "spec.tensorboard.logdir", "unknown field", id="tensorboard-unknown"),
    pytest.param(caffe2job(backend_x=1), "spec.backend.backend_x", "unknown field",
                 id="caffe2-backend-unknown"),
    pytest.param(caffe2job(type="redis", redisPort="6379"), "spec.backend.redisPort", "integer",
                 id="caffe2-redis-port-string"),
    pytest.param(caffe2job(type="nfs"), "spec.backend.nfsPath", "required", id="nfs-no-path"),
    pytest.param(caffe2job(workers=2, type="none"), "spec.backend.type", "cannot connect",
                 id="none-backend-two-shards"),
])
def test_framework_rules_refused_with_the_field_path(doc: Doc, path: str, words: str) -> None:
    errors = errors_of(doc)
    assert path in errors, f"expected an error at {path}, got {errors}"
    assert words in errors[path], errors[path]


def test_framework_container_is_required() -> None:
    doc = tfjob(Worker=2)
    doc["spec"]["replicaSpecs"]["Worker"]["template"] = template(container("main"))
    errors = errors_of(doc)
    assert "needs a container named 'tensorflow'" in errors[f"{WT}.containers"]
    # A PS may omit it: the tf_ps_server plugin adds a standard gRPC server.
    ps = tfjob(Worker=1, PS=1)
    ps["spec"]["replicaSpecs"]["PS"]["template"] = {"spec": {"containers": []}}
    assert parse(ps).spec.replica_specs["PS"].replicas == 1


def test_every_problem_is_reported_not_only_the_first() -> None:
    doc = mxjob()
    specs = doc["spec"]["replicaSpecs"]
    specs["Scheduler"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "x"
    specs["Server"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "p"}]
    specs["Worker"]["template"]["spec"]["securityContext"] = {"runAsUserr": 1}
    with pytest.raises(SpecInvalid) as info:
        parse(doc)
    paths = [e.path for e in info.value.errors]
    assert paths == sorted([
        "spec.replicaSpecs.Scheduler.template.spec.containers[0].imagePullPolicyy",
        "spec.replicaSpecs.Server.template.spec.containers[0].ports[0].containerPort",
        "spec.replicaSpecs.Worker.template.spec.securityContext.runAsUserr",
    ])
    summary = str(info.value)
    assert "invalid job (3 problems)" in summary
    assert all(p in summary for p in paths)

    # Model errors are collected together too.
    doc = mxjob()
    doc["spec"]["runPolicy"] = {"backoffLimit": -1, "suspend": "maybe"}
    doc["spec"]["replicaSpecs"]["Worker"]["replicas"] = "many"
    assert {"spec.runPolicy.backoffLimit", "spec.runPolicy.suspend",
            f"{W}.replicas"} <= set(errors_of(doc))


@pytest.mark.parametrize("doc", [None, [], "MxJob", 3], ids=["null", "list", "string", "int"])
def test_a_job_must_be_a_mapping(doc: Any) -> None:
    assert "" in errors_of(doc)


def test_unknown_kind_names_the_installed_kinds() -> None:
    errors = errors_of({**mxjob(), "kind": "PyTorchJob"})
    assert errors["kind"] == ("unknown kind 'PyTorchJob' (installed kinds: Caffe2Job, MxJob, "
                              "TfJob)")


def test_name_length_limit_counts_the_longest_derived_name() -> None:
    # <job>-scheduler-0 is the longest name of an MxJob; a Service name has at most 63.
    assert parse({**mxjob(), "metadata": {"name": "a" * 51}})
    errors = errors_of({**mxjob(), "metadata": {"name": "a" * 52}})
    assert "use at most 51 characters" in errors["metadata.name"]
    # Ten workers: <job>-worker-9; a hundred: <job>-worker-99.
    doc = caffe2job("b" * 54, workers=100)
    assert "too long" in errors_of(doc)["metadata.name"]
    # A TfJob with TensorBoard also owns <job>-tensorboard.
    board = tfjob("c" * 52, Worker=2)
    board["spec"]["tensorboard"] = {"logDir": "/logs"}
    assert "c" * 52 + "-tensorboard" in errors_of(board)["metadata.name"]


def _cel_accepts_name(doc: Doc) -> bool:
    """The CRD's CEL rule on name length (crdgen._root_rules), evaluated in Python."""
    name = doc["metadata"]["name"]
    return all(spec.get("replicas", 1) == 0 or
               len(name) + len(key) + len(str(spec.get("replicas", 1) - 1)) + 2 <= 63
               for key, spec in doc["spec"]["replicaSpecs"].items())


@pytest.mark.parametrize(("length", "workers"), [(52, 2), (54, 2), (54, 10)])
def test_api_server_and_parse_job_agree_on_name_length(length: int, workers: int) -> None:
    doc = caffe2job("d" * length, workers=workers)  # longest object: <job>-worker-<last>
    fits = length + len(f"-worker-{workers - 1}") <= 63
    assert _cel_accepts_name(doc) == fits
    try:
        parse(doc)
        accepted = True
    except SpecInvalid:
        accepted = False
    assert accepted == fits


def test_spec_error_formatting() -> None:
    assert str(SpecError("spec.x", "bad")) == "spec.x: bad"
    assert str(SpecError("", "bad file")) == "bad file"
    exc = SpecInvalid([SpecError("b", "2"), SpecError("a", "1"), SpecError("a", "1")], "f.yaml")
    assert exc.errors == [SpecError("a", "1"), SpecError("b", "2")]
    assert exc.summary() == "f.yaml: invalid job (2 problems):\n  - a: 1\n  - b: 2"
