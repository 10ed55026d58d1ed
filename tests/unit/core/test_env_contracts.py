"""The user-facing contract of what a job gets (docs/api.md): environment, names,
labels, Services, owner references, extra objects and success rules.

Two layers: golden files pin the FULL environment of every container of every example job
(`tests/golden/<example-stem>.env.yaml`; rewrite them with `UPDATE_GOLDEN=1 pytest ...` and
review the diff), and explicit assertions state each rule of the contract, so a golden file
rewritten by mistake cannot hide a broken rule.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helpers import (
    EXAMPLES,
    GOLDEN_DIR,
    PLUGINS,
    REPO,
    Doc,
    builtin_plugins,
    caffe2job,
    container,
    containers_of,
    env_list,
    env_values,
    framework_of,
    load_doc,
    mxjob,
    named,
    parse,
    plugin_env,
    render,
    template,
    tfjob,
)
from trainjobs.core.render import PLACEHOLDER_UID, RenderedJob, expected_replicas
from trainjobs.errors import PluginError
from trainjobs.plugin.manager import DISABLE_AUTOLOAD_ENV, DISABLE_PLUGINS_ENV, load_plugins
from trainjobs.plugin.types import (
    Address,
    ClusterLayout,
    Replica,
    ReplicaOutcome,
    ReplicaPhase,
)

UPDATE_GOLDEN = os.environ.get("UPDATE_GOLDEN") == "1"
JOB_ROLE = "trainjobs.io/job-role"
DMLC_COMMON = {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
               "DMLC_NUM_WORKER", "MX_CONFIG"}


# Golden files --------------------------------------------------------------------------------


def _readable(value: str) -> Any:
    """JSON values (MX_CONFIG, TF_CONFIG, CAFFE2_CONFIG) as objects, the rest as written."""
    if value.startswith(("{", "[")):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def environment_of(rendered: RenderedJob) -> dict[str, Any]:
    """`<Kind>/<name>` -> container -> variable -> value, for everything the job runs."""
    out: dict[str, Any] = {}
    for obj in rendered.manifests():
        if obj["kind"] not in ("Pod", "Deployment"):
            continue
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        out[key] = {}
        for c in containers_of(obj):
            out[key][c["name"]] = {
                e["name"]: _readable(e["value"]) if "value" in e else {"valueFrom": e["valueFrom"]}
                for e in env_list(c)
            }
    return out


def golden_path(example: Path) -> Path:
    return GOLDEN_DIR / f"{example.stem}.env.yaml"


def test_examples_exist_and_have_distinct_stems() -> None:
    assert len(EXAMPLES) >= 5
    stems = [p.stem for p in EXAMPLES]
    assert len(set(stems)) == len(stems), f"golden files are named by stem: {stems}"


def test_no_stale_golden_files() -> None:
    expected = {golden_path(p).name for p in EXAMPLES}
    present = {p.name for p in GOLDEN_DIR.glob("*.env.yaml")}
    assert present <= expected, f"golden files without an example: {sorted(present - expected)}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[str(p.relative_to(REPO)) for p in EXAMPLES])
def test_environment_matches_golden(example: Path) -> None:
    actual = environment_of(render(load_doc(example)))
    path = golden_path(example)
    header = (f"# The full environment of every container of {example.relative_to(REPO)}, "
              "rendered for Kubernetes.\n# Generated: UPDATE_GOLDEN=1 pytest "
              "tests/unit/core/test_env_contracts.py (then review the diff).\n")
    text = header + yaml.safe_dump(actual, sort_keys=False, width=100, allow_unicode=True)
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: run UPDATE_GOLDEN=1 pytest {__file__}"
    expected = yaml.safe_load(path.read_text())
    assert actual == expected, (f"the environment of {example.name} changed; if on purpose, "
                                "rewrite with UPDATE_GOLDEN=1 and review the diff")
    # Order matters too: injected variables come first, in a stable order.
    assert [list(c) for pod in actual.values() for c in pod.values()] == [
        list(c) for pod in expected.values() for c in pod.values()]


# Helpers ---------------------------------------------------------------------------------------


def pod_env(rendered: RenderedJob, pod: str, container_name: str) -> dict[str, str]:
    return env_values(named(rendered.pods[pod]["spec"]["containers"], container_name))


def local_layout(doc: Doc, first_port: int = 41000) -> ClusterLayout:
    """What the local backend writes: 127.0.0.1 and a port of its own for every replica."""
    job = parse(doc)
    replicas = expected_replicas(job)
    addresses = {r: Address("127.0.0.1", first_port + i) for i, r in enumerate(replicas)}
    allocated: dict[str, Address] = {}

    def allocate(name: str, port: int) -> Address:
        return allocated.setdefault(name, Address("127.0.0.1", first_port + 900 + len(allocated)))

    return ClusterLayout(addresses, job_name=job.name, allocate=allocate)


# MXNet ---------------------------------------------------------------------------------------


def test_mxnet_env_in_every_container_of_every_replica() -> None:
    doc = mxjob("mnist", scheduler=1, server=2, worker=3)
    for spec in doc["spec"]["replicaSpecs"].values():  # a sidecar in every pod
        spec["template"]["spec"]["containers"].append(container("sidecar"))
    rendered = render(doc)
    assert list(rendered.pods) == ["mnist-scheduler-0", "mnist-server-0", "mnist-server-1",
                                   "mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    for name, pod in rendered.pods.items():
        rep = rendered.replicas[name]
        role = rep.type.lower()
        for c in pod["spec"]["containers"]:
            env = env_values(c)
            assert set(env) >= DMLC_COMMON, (name, c["name"])
            assert env["DMLC_ROLE"] == role
            assert env["DMLC_PS_ROOT_URI"] == "mnist-scheduler-0"
            assert env["DMLC_PS_ROOT_PORT"] == "9091"
            assert (env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]) == ("2", "3")
            assert env["DMLC_USE_KUBERNETES"] == "1"
            assert "DMLC_NODE_HOST" not in env  # Kubernetes: each pod advertises its own IP
            if role == "worker":
                assert env["DMLC_WORKER_ID"] == str(rep.index)
            else:
                assert "DMLC_WORKER_ID" not in env
            # The port is exposed, by name, on the scheduler's framework container only.
            ports = c.get("ports", [])
            if c["name"] == "mxnet" and role == "scheduler":
                assert ports == [{"name": "mxjob-port", "containerPort": 9091}]
            else:
                assert ports == []


def test_mx_config_structure() -> None:
    rendered = render(mxjob("mnist", server=2, worker=2))
    config = json.loads(pod_env(rendered, "mnist-worker-1", "mxnet")["MX_CONFIG"])
    assert config == {
        "cluster": {
            "scheduler": [{"url": "mnist-scheduler-0", "port": 9091}],
            "server": [{"url": "mnist-server-0", "port": 9091},
                       {"url": "mnist-server-1", "port": 9091}],
            "worker": [{"url": "mnist-worker-0", "port": 9091},
                       {"url": "mnist-worker-1", "port": 9091}],
        },
        "labels": {"scheduler": "", "server": "", "worker": ""},
        "task": {"type": "worker", "index": 1},
    }
    scheduler = json.loads(pod_env(rendered, "mnist-scheduler-0", "mxnet")["MX_CONFIG"])
    assert scheduler["task"] == {"type": "scheduler", "index": 0}
    assert scheduler["cluster"] == config["cluster"]


def test_mxnet_port_from_a_named_container_port() -> None:
    doc = mxjob("mnist", server=1, worker=1)
    sched = doc["spec"]["replicaSpecs"]["Scheduler"]["template"]["spec"]["containers"][0]
    sched["ports"] = [{"name": "mxjob-port", "containerPort": 9000}]
    rendered = render(doc)
    env = pod_env(rendered, "mnist-worker-0", "mxnet")
    assert env["DMLC_PS_ROOT_PORT"] == "9000"
    assert json.loads(env["MX_CONFIG"])["cluster"]["scheduler"] == [
        {"url": "mnist-scheduler-0", "port": 9000}]
    assert rendered.services["mnist-scheduler-0"]["spec"]["ports"] == [
        {"name": "mxjob-port", "port": 9000, "targetPort": 9000}]
    assert rendered.pods["mnist-scheduler-0"]["spec"]["containers"][0]["ports"] == [
        {"name": "mxjob-port", "containerPort": 9000}]


def test_mxnet_local_backend() -> None:
    doc = mxjob("mnist", server=1, worker=2)
    layout = local_layout(doc)
    rendered = render(doc, backend="local", layout=layout)
    scheduler = layout.address(Replica("Scheduler", 0))
    for name in rendered.pods:
        env = pod_env(rendered, name, "mxnet")
        assert "DMLC_USE_KUBERNETES" not in env
        assert env["DMLC_NODE_HOST"] == "127.0.0.1"  # every process advertises loopback
        assert env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
        assert env["DMLC_PS_ROOT_PORT"] == str(scheduler.port)
    env = pod_env(rendered, "mnist-worker-1", "mxnet")
    assert env["DMLC_WORKER_ID"] == "1"
    cluster = json.loads(env["MX_CONFIG"])["cluster"]
    assert cluster["worker"] == [
        {"url": "127.0.0.1", "port": layout.address(Replica("Worker", i)).port} for i in (0, 1)]
    # Only the scheduler listens on the framework port (ps-lite's servers and workers bind
    # ports of their own): no containerPort where nothing listens (hostNetwork: node ports).
    sched = rendered.pods["mnist-scheduler-0"]["spec"]["containers"][0]
    assert sched["ports"] == [{"name": "mxjob-port", "containerPort": scheduler.port}]
    worker = rendered.pods["mnist-worker-1"]["spec"]["containers"][0]
    assert "ports" not in worker


# TensorFlow ----------------------------------------------------------------------------------


def tf_config(rendered: RenderedJob, pod: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(pod_env(rendered, pod, "tensorflow")["TF_CONFIG"])
    return config


def test_tf_config_with_chief() -> None:
    rendered = render(tfjob("tfj", Chief=1, Worker=2, PS=1))
    cluster = {"chief": ["tfj-chief-0:2222"], "worker": ["tfj-worker-0:2222",
                                                         "tfj-worker-1:2222"],
               "ps": ["tfj-ps-0:2222"]}
    assert tf_config(rendered, "tfj-worker-1") == {
        "cluster": cluster, "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    assert tf_config(rendered, "tfj-chief-0")["task"] == {"type": "chief", "index": 0}
    assert tf_config(rendered, "tfj-ps-0")["task"] == {"type": "ps", "index": 0}
    assert rendered.pods["tfj-chief-0"]["metadata"]["labels"][JOB_ROLE] == "master"
    assert [n for n, p in rendered.pods.items() if JOB_ROLE in p["metadata"]["labels"]] == [
        "tfj-chief-0"]


def test_tf_config_with_master() -> None:
    rendered = render(tfjob("tfj", Master=1, Worker=1))
    assert list(rendered.pods) == ["tfj-master-0", "tfj-worker-0"]
    config = tf_config(rendered, "tfj-master-0")
    assert config["cluster"] == {"master": ["tfj-master-0:2222"], "worker": ["tfj-worker-0:2222"]}
    assert config["task"] == {"type": "master", "index": 0}
    assert rendered.pods["tfj-master-0"]["metadata"]["labels"][JOB_ROLE] == "master"
    assert JOB_ROLE not in rendered.pods["tfj-worker-0"]["metadata"]["labels"]


def test_evaluator_has_a_task_but_is_not_in_the_cluster() -> None:
    rendered = render(tfjob("tfj", Chief=1, Worker=1, Evaluator=1))
    evaluator = tf_config(rendered, "tfj-evaluator-0")
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert evaluator["cluster"] == {"chief": ["tfj-chief-0:2222"], "worker": ["tfj-worker-0:2222"]}
    assert tf_config(rendered, "tfj-worker-0")["cluster"] == evaluator["cluster"]


def test_no_tf_config_for_a_single_replica_job() -> None:
    for doc in (tfjob("one", Worker=1), tfjob("one", Chief=1), tfjob("one", Chief=1, Worker=0)):
        rendered = render(doc)
        (pod,) = rendered.pods.values()
        (c,) = pod["spec"]["containers"]
        assert "env" not in c
        assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]


def test_tf_config_only_in_the_tensorflow_container() -> None:
    doc = tfjob("tfj", Worker=2)
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"].insert(
        0, container("logger"))
    rendered = render(doc)
    logger, tf = rendered.pods["tfj-worker-0"]["spec"]["containers"]
    assert logger == container("logger")
    assert "TF_CONFIG" in env_values(tf)


def test_no_chief_worker_zero_is_master_unless_all_workers() -> None:
    rendered = render(tfjob("tfj", Worker=3, PS=1))
    roles = {n: p["metadata"]["labels"].get(JOB_ROLE) for n, p in rendered.pods.items()}
    assert roles == {"tfj-worker-0": "master", "tfj-worker-1": None, "tfj-worker-2": None,
                     "tfj-ps-0": None}
    doc = tfjob("tfj", Worker=3, PS=1)
    doc["spec"]["successPolicy"] = "AllWorkers"
    rendered = render(doc)
    assert not any(JOB_ROLE in p["metadata"]["labels"] for p in rendered.pods.values())


def test_no_job_role_for_mxjob_and_caffe2job() -> None:
    for doc in (mxjob(), caffe2job()):
        rendered = render(doc)
        assert not any(JOB_ROLE in p["metadata"]["labels"] for p in rendered.pods.values())


def test_default_ps_server_only_when_the_ps_lacks_a_tensorflow_container() -> None:
    from trainjobs_features.tf_ps_server import PS_SERVER_IMAGE, PS_SERVER_PROGRAM

    # The example: a PS template with no containers at all.
    rendered = render(load_doc(REPO / "examples/tensorflow/ps.yaml"))
    (server,) = rendered.pods["tf-ps-ps-0"]["spec"]["containers"]
    assert server["name"] == "tensorflow"
    assert server["image"] == PS_SERVER_IMAGE
    assert server["command"] == ["python", "-u", "-c", PS_SERVER_PROGRAM]
    assert json.loads(env_values(server)["TF_CONFIG"])["task"] == {"type": "ps", "index": 0}
    assert server["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    # The program it runs reads TF_CONFIG and starts a server for its own task.
    compile(PS_SERVER_PROGRAM, "ps_server", "exec")
    assert "TF_CONFIG" in PS_SERVER_PROGRAM and "tf.distribute.Server" in PS_SERVER_PROGRAM

    # A PS with its own `tensorflow` container keeps it, and only it.
    doc = tfjob("tfj", Chief=1, PS=2)
    rendered = render(doc)
    for name in ("tfj-ps-0", "tfj-ps-1"):
        (own,) = rendered.pods[name]["spec"]["containers"]
        assert own["image"] == "example.invalid/tensorflow:1"
        assert "TF_CONFIG" in env_values(own)

    # A PS with only a sidecar gets the server in front of it; the sidecar is left alone.
    doc = tfjob("tfj", Chief=1, PS=1)
    doc["spec"]["replicaSpecs"]["PS"]["template"] = template(container("metrics"))
    tf, metrics = render(doc).pods["tfj-ps-0"]["spec"]["containers"]
    assert (tf["name"], tf["image"]) == ("tensorflow", PS_SERVER_IMAGE)
    assert metrics == container("metrics")

    # Never for other replica types (they must bring their own container: validation says so).
    assert all(len(p["spec"]["containers"]) == 1
               for n, p in rendered.pods.items() if not n.startswith("tf-ps-ps"))


def test_tensorboard_deployment_and_service() -> None:
    rendered = render(load_doc(REPO / "examples/tensorflow/ps.yaml"))
    kinds = [(o["kind"], o["metadata"]["name"]) for o in rendered.extras]
    assert kinds == [("Deployment", "tf-ps-tensorboard"), ("Service", "tf-ps-tensorboard")]
    deployment, service = rendered.extras
    (board,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--logdir=/logs/tf-ps" in board["command"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items())
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["type"] == "ClusterIP"
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == board["ports"][0]["containerPort"]
    for obj in rendered.extras:
        assert obj["metadata"]["namespace"] == "default"
        assert obj["metadata"]["ownerReferences"] == [owner("TfJob", "tf-ps")]
        assert obj["metadata"]["labels"]["trainjobs.io/job-name"] == "tf-ps"

    # Volumes and the service type are passed through; no tensorboard, no objects.
    doc = tfjob("tfj", Worker=2)
    doc["spec"]["tensorboard"] = {
        "logDir": "/logs", "serviceType": "NodePort",
        "volumes": [{"name": "logs", "persistentVolumeClaim": {"claimName": "logs"}}],
        "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}
    deployment, service = render(doc).extras
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["volumes"] == doc["spec"]["tensorboard"]["volumes"]
    assert pod_spec["containers"][0]["volumeMounts"] == [{"name": "logs", "mountPath": "/logs"}]
    assert service["spec"]["type"] == "NodePort"
    assert render(tfjob("tfj", Worker=2)).extras == []


# Caffe2 --------------------------------------------------------------------------------------


def test_caffe2_shards_managed_redis() -> None:
    doc = caffe2job("shards", workers=3)  # no backend: redis for more than one worker
    doc["metadata"]["uid"] = "7d3c5a9e-1111-2222-3333-444455556666"
    rendered = render(doc)
    envs = [pod_env(rendered, f"shards-worker-{i}", "caffe2") for i in range(3)]
    for i, env in enumerate(envs):
        assert env["SHARD_ID"] == str(i)
        assert env["NUM_SHARDS"] == "3"
        assert env["RUN_ID"] == "7d3c5a9e-1111-2222-3333-444455556666-0"  # <uid>-<attempt>
        assert (env["REDIS_HOST"], env["REDIS_PORT"]) == ("shards-redis", "6379")
        assert "NFS_PATH" not in env
        assert json.loads(env["CAFFE2_CONFIG"]) == {
            "cluster": {"worker": ["shards-worker-0:2222", "shards-worker-1:2222",
                                   "shards-worker-2:2222"]},
            "task": {"type": "worker", "index": i}}
    # The managed Redis: a Pod and a Service <job>-redis on 6379, owned by the job.
    kinds = [(o["kind"], o["metadata"]["name"]) for o in rendered.extras]
    assert kinds == [("Pod", "shards-redis"), ("Service", "shards-redis")]
    pod, service = rendered.extras
    assert service["spec"]["ports"][0]["port"] == 6379
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (redis,) = pod["spec"]["containers"]
    assert redis["command"][:3] == ["redis-server", "--port", "6379"]
    assert "0.0.0.0" in redis["command"]
    for obj in rendered.extras:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == doc["metadata"]["uid"]
    # No replica's Service selects the Redis pod, and the Redis Service selects no replica.
    for name, replica_pod in rendered.pods.items():
        labels = replica_pod["metadata"]["labels"]
        assert not service["spec"]["selector"].items() <= labels.items(), name


def test_caffe2_run_id_placeholder_without_uid() -> None:
    rendered = render(caffe2job("shards", workers=2))
    ids = {pod_env(rendered, n, "caffe2")["RUN_ID"] for n in rendered.pods}
    assert ids == {f"{PLACEHOLDER_UID}-0"}


def test_caffe2_run_id_is_new_for_each_attempt() -> None:
    """RUN_ID names one attempt of the rendezvous: a restart never meets the old keys."""
    job = parse(caffe2job("shards", workers=2))
    job = job.model_copy(update={
        "metadata": job.metadata.model_copy(update={"uid": "7d3c5a9e"}),
        "status": job.status.model_copy(update={"attempt": 3})})
    rendered = render(job)
    for name, pod in rendered.pods.items():
        assert pod_env(rendered, name, "caffe2")["RUN_ID"] == "7d3c5a9e-3"
        assert pod["metadata"]["annotations"] == {"trainjobs.io/attempt": "3",
                                                  "trainjobs.io/replicas": "Worker=2"}
        assert pod["spec"]["restartPolicy"] == "Never"


def test_caffe2_explicit_redis_host() -> None:
    rendered = render(caffe2job("shards", workers=2, type="redis", redisHost="redis.infra",
                                redisPort=6380))
    for name in rendered.pods:
        env = pod_env(rendered, name, "caffe2")
        assert (env["REDIS_HOST"], env["REDIS_PORT"]) == ("redis.infra", "6380")
    assert rendered.extras == [], "an explicit redisHost must not start a managed Redis"


def test_caffe2_nfs_and_none_backends() -> None:
    rendered = render(load_doc(REPO / "examples/caffe2/nfs.yaml"))
    for name in rendered.pods:
        env = pod_env(rendered, name, "caffe2")
        assert env["NFS_PATH"] == "/tmp/trainjobs-caffe2-nfs"
        assert not {"REDIS_HOST", "REDIS_PORT"} & set(env)
    assert rendered.extras == []
    # One worker, no backend: none; no rendezvous variables at all.
    single = render(caffe2job("solo", workers=1))
    env = pod_env(single, "solo-worker-0", "caffe2")
    assert set(env) == {"SHARD_ID", "NUM_SHARDS", "RUN_ID", "CAFFE2_CONFIG"}
    assert single.extras == []


def test_caffe2_managed_redis_local_backend() -> None:
    doc = caffe2job("shards", workers=2)
    layout = local_layout(doc)
    rendered = render(doc, backend="local", layout=layout)
    redis_address = layout.component("redis", 6379)
    for name in rendered.pods:
        env = pod_env(rendered, name, "caffe2")
        assert (env["REDIS_HOST"], env["REDIS_PORT"]) == ("127.0.0.1", str(redis_address.port))
        workers = json.loads(env["CAFFE2_CONFIG"])["cluster"]["worker"]
        assert workers == [str(layout.address(Replica("Worker", i))) for i in (0, 1)]
    (redis,) = rendered.extras[0]["spec"]["containers"]
    assert redis["command"][:5] == ["redis-server", "--port", str(redis_address.port),
                                    "--bind", "127.0.0.1"]


def test_caffe2_env_only_in_the_caffe2_container() -> None:
    doc = caffe2job("shards", workers=2)
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        container("uploader"))
    rendered = render(doc)
    _, uploader = rendered.pods["shards-worker-0"]["spec"]["containers"]
    assert uploader == container("uploader")


# Accelerators --------------------------------------------------------------------------------

GPU_CONFIG = {"accelerators": {"nvidia.com/gpu": {
    "volumes": [{"name": "nvidia-libs", "mountPath": "/usr/local/nvidia/lib64",
                 "hostPath": "/opt/nvidia/lib64"}],
    "envVars": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
                {"name": "NVIDIA_VISIBLE", "value": 1}],
}}}


def test_accelerator_volumes_and_env_only_where_requested() -> None:
    doc = mxjob("gpu", server=1, worker=2)
    worker = doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    worker["containers"].append(container("sidecar"))
    worker["containers"].append(container("requester", resources={
        "requests": {"nvidia.com/gpu": "1"}},
        env=[{"name": "LD_LIBRARY_PATH", "value": "/mine"}]))
    rendered = render(doc, controller_config=GPU_CONFIG)
    pod = rendered.pods["gpu-worker-0"]
    assert pod["spec"]["volumes"] == [{"name": "nvidia-libs",
                                       "hostPath": {"path": "/opt/nvidia/lib64"}}]
    mxnet, sidecar, requester = pod["spec"]["containers"]
    mount = [{"name": "nvidia-libs", "mountPath": "/usr/local/nvidia/lib64"}]
    assert mxnet["volumeMounts"] == mount and requester["volumeMounts"] == mount
    assert env_values(mxnet)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert env_values(mxnet)["NVIDIA_VISIBLE"] == "1"
    assert env_values(requester)["LD_LIBRARY_PATH"] == "/mine", "the user's value stays"
    assert "volumeMounts" not in sidecar
    assert not {"LD_LIBRARY_PATH", "NVIDIA_VISIBLE"} & set(env_values(sidecar))
    # Pods that request nothing are untouched.
    for name in ("gpu-scheduler-0", "gpu-server-0"):
        spec = rendered.pods[name]["spec"]
        assert "volumes" not in spec
        assert "LD_LIBRARY_PATH" not in env_values(spec["containers"][0])
    # Without a controller config, nothing is added.
    plain = render(doc).pods["gpu-worker-0"]
    assert "volumes" not in plain["spec"]
    assert "LD_LIBRARY_PATH" not in env_values(plain["spec"]["containers"][0])


# Names, labels, Services, owners -------------------------------------------------------------


def owner(kind: str, name: str, uid: str = PLACEHOLDER_UID) -> dict[str, Any]:
    return {"apiVersion": "trainjobs.io/v1alpha1", "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


ALL_JOBS: list[tuple[str, Callable[[], Doc]]] = [
    ("mxjob", lambda: mxjob("mx-a", server=2, worker=3)),
    ("tfjob", lambda: tfjob("tf-a", Chief=1, Worker=2, PS=2, Evaluator=1)),
    ("tfjob-master", lambda: tfjob("tf-b", Master=1, Worker=1)),
    ("caffe2job", lambda: caffe2job("c2-a", workers=3)),
    *[(p.stem, functools.partial(load_doc, p)) for p in EXAMPLES],
]


@pytest.mark.parametrize("make", [m for _, m in ALL_JOBS], ids=[i for i, _ in ALL_JOBS])
def test_names_labels_services_and_owners(make: Callable[[], Doc]) -> None:
    doc = make()
    doc["metadata"]["namespace"] = "team-a"
    doc["metadata"]["uid"] = "0b1c2d3e-0000-4000-8000-000000000001"
    job = parse(doc)
    framework = framework_of(job.kind)
    rendered = render(job)

    expected = [f"{job.name}-{key.lower()}-{i}" for key, rspec in job.spec.replica_specs.items()
                for i in range(rspec.replicas)]
    assert list(rendered.pods) == expected
    assert list(rendered.services) == expected
    for name in expected:
        rep = rendered.replicas[name]
        pod, service = rendered.pods[name], rendered.services[name]
        labels = {"trainjobs.io/job-name": job.name, "trainjobs.io/framework": framework.name,
                  "trainjobs.io/replica-type": rep.type.lower(),
                  "trainjobs.io/replica-index": str(rep.index)}
        for obj in (pod, service):
            assert obj["metadata"]["name"] == name
            assert obj["metadata"]["namespace"] == "team-a"
            assert obj["metadata"]["labels"].items() >= labels.items()
            assert obj["metadata"]["ownerReferences"] == [
                owner(job.kind, job.name, doc["metadata"]["uid"])]
        spec = service["spec"]
        assert spec["clusterIP"] == "None"
        assert spec["publishNotReadyAddresses"] is True
        assert spec["selector"] == labels
        # The Service exposes the framework container's named port (where the replica
        # listens; the others get none, and their Service the default port).
        fw = named(pod["spec"]["containers"], framework.container_name)
        ports = [p["containerPort"] for p in fw.get("ports", [])
                 if p["name"] == framework.port_name]
        rtype = framework.replica_type(rep.type)
        assert rtype is not None
        assert len(ports) == (1 if rtype.listens else 0), (name, fw.get("ports"))
        port = ports[0] if ports else framework.default_port
        assert spec["ports"] == [{"name": framework.port_name, "port": port,
                                  "targetPort": port}]
        # The selector picks exactly this replica's pod.
        chosen = [n for n, p in rendered.pods.items()
                  if spec["selector"].items() <= p["metadata"]["labels"].items()]
        assert chosen == [name]
    for obj in rendered.extras:
        assert obj["metadata"]["ownerReferences"] == [
            owner(job.kind, job.name, doc["metadata"]["uid"])]
        assert obj["metadata"]["namespace"] == "team-a"


def test_user_labels_and_annotations_are_kept_but_trainjobs_labels_win() -> None:
    doc = mxjob("lab", server=1, worker=1)
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"] = {
        "labels": {"team": "vision", "trainjobs.io/replica-index": "9"},
        "annotations": {"prometheus.io/scrape": "true"}}
    pod = render(doc).pods["lab-worker-0"]
    assert pod["metadata"]["labels"]["team"] == "vision"
    assert pod["metadata"]["labels"]["trainjobs.io/replica-index"] == "0"
    # The user's annotation is kept beside the replica counts the pod was rendered for.
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "trainjobs.io/replicas": "Scheduler=1,Server=1,Worker=1"}


@pytest.mark.parametrize(("policy", "pod_policy"), [
    ("Never", "Never"), ("ExitCode", "Never"), ("OnFailure", "OnFailure"), ("Always", "Always")])
def test_pod_restart_policy(policy: str, pod_policy: str) -> None:
    doc = mxjob("rp", server=1, worker=1)
    doc["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = policy
    rendered = render(doc)
    assert rendered.pods["rp-worker-0"]["spec"]["restartPolicy"] == pod_policy
    assert rendered.pods["rp-server-0"]["spec"]["restartPolicy"] == "Never"


# Determinism ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [m for _, m in ALL_JOBS], ids=[i for i, _ in ALL_JOBS])
def test_render_is_deterministic_and_leaves_the_job_alone(make: Callable[[], Doc]) -> None:
    job = parse(make())
    before = job.model_dump()
    first = render(job).manifests()
    second = render(job).manifests()
    assert first == second
    assert yaml.safe_dump_all(first) == yaml.safe_dump_all(second)
    assert job.model_dump() == before
    # The same with freshly loaded plugins: nothing depends on the manager's history.
    assert render(parse(make()), plugins=builtin_plugins()).manifests() == first
    # Objects do not share mutable parts (a caller editing one pod must not edit another).
    pods = list(render(job).pods.values())
    pods[0]["spec"]["containers"][0]["image"] = "changed"
    assert all(p["spec"]["containers"][0].get("image") != "changed" for p in pods[1:])


# Success rules -------------------------------------------------------------------------------


def outcomes(doc: Doc, done: set[str]) -> list[ReplicaOutcome]:
    """One outcome per expected replica: Succeeded for those named in `done`, else Running."""
    job = parse(doc)
    out = []
    for rep in expected_replicas(job):
        if rep.object_name(job.name) in done:
            out.append(ReplicaOutcome(rep, ReplicaPhase.SUCCEEDED, 0))
        else:
            out.append(ReplicaOutcome(rep, ReplicaPhase.RUNNING))
    return out


def succeeded(doc: Doc, done: set[str]) -> bool:
    job = parse(doc)
    return PLUGINS.job_succeeded(job, framework_of(job.kind), outcomes(doc, done))


def test_mxjob_succeeds_when_all_workers_succeed() -> None:
    doc = mxjob("m", server=1, worker=2)
    assert not succeeded(doc, set())
    assert not succeeded(doc, {"m-worker-0"})
    assert not succeeded(doc, {"m-scheduler-0", "m-server-0", "m-worker-1"})
    assert succeeded(doc, {"m-worker-0", "m-worker-1"})  # scheduler, servers never exit


def test_tfjob_chief_decides() -> None:
    doc = tfjob("t", Chief=1, Worker=2, PS=1)
    assert not succeeded(doc, {"t-worker-0", "t-worker-1"})
    assert succeeded(doc, {"t-chief-0"})
    master = tfjob("t", Master=1, Worker=1)
    assert succeeded(master, {"t-master-0"})
    assert not succeeded(master, {"t-worker-0"})


def test_tfjob_without_chief_worker_zero_decides() -> None:
    doc = tfjob("t", Worker=3, PS=1)
    assert succeeded(doc, {"t-worker-0"})
    assert not succeeded(doc, {"t-worker-1", "t-worker-2", "t-ps-0"})


def test_tfjob_all_workers_policy() -> None:
    doc = tfjob("t", Worker=3, PS=1)
    doc["spec"]["successPolicy"] = "AllWorkers"
    assert not succeeded(doc, {"t-worker-0"})
    assert not succeeded(doc, {"t-worker-0", "t-worker-1"})
    assert succeeded(doc, {"t-worker-0", "t-worker-1", "t-worker-2"})


def test_caffe2job_succeeds_when_all_shards_succeed() -> None:
    doc = caffe2job("c", workers=3)
    assert not succeeded(doc, {"c-worker-0", "c-worker-1"})
    assert succeeded(doc, {"c-worker-0", "c-worker-1", "c-worker-2"})


@pytest.mark.parametrize(("plugin", "doc"), [
    ("mxnet", mxjob()), ("tensorflow", tfjob(Worker=2)), ("caffe2", caffe2job())])
def test_success_rule_is_answered_only_by_the_kinds_own_plugin(plugin: str, doc: Doc) -> None:
    job = parse(doc)
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1", DISABLE_PLUGINS_ENV: plugin}):
        others = load_plugins()
    with pytest.raises(PluginError, match=f"no plugin implements the success rule of {job.kind}"):
        others.job_succeeded(job, framework_of(job.kind), outcomes(doc, set()))


def test_examples_render_for_both_backends() -> None:
    for path in EXAMPLES:
        doc = load_doc(path)
        assert render(doc).pods
        assert render(doc, backend="local", layout=local_layout(doc)).pods


def test_replica_type_keys_keep_the_user_spelling() -> None:
    rendered = render(tfjob("t", Master=1, Worker=1))
    assert rendered.replicas["t-master-0"] == Replica("Master", 0)
    assert rendered.pods["t-master-0"]["metadata"]["labels"]["trainjobs.io/replica-type"] == (
        "master")


def test_template_volume_and_env_from_the_user_survive_rendering() -> None:
    doc = caffe2job("v", workers=2)
    spec = doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    spec["containers"][0]["env"] = [{"name": "POD_IP", "valueFrom": {
        "fieldRef": {"fieldPath": "status.podIP"}}}, {"name": "X", "value": "$(SHARD_ID)"}]
    c = render(doc).pods["v-worker-1"]["spec"]["containers"][0]
    names = [e["name"] for e in c["env"]]
    # Injected first, so the user's $(SHARD_ID) reference resolves.
    assert names[-2:] == ["POD_IP", "X"]
    assert names.index("SHARD_ID") < names.index("X")
