"""The Helm chart (charts/trainjobs) with a real Helm against the real control plane.

What is checked, and how:

- ``helm lint --strict`` is clean; the chart's CRDs are byte-identical to ``crds/``; its version
  and appVersion follow pyproject.toml.
- ``helm template`` with the default values and with non-default ones renders, and every
  manifest (the ``helm test`` pod included) passes ``kubectl apply --dry-run=server`` in a
  namespace that enforces the "restricted" Pod Security Standard.
- The rendered RBAC is exactly the permissions the operator's code uses (no more, no wildcard).
- ``helm install`` creates everything, installs the CRDs, ``helm test`` runs its hook pod.
- The operator then runs *out of cluster* as a local process with the Deployment's own
  arguments and the chart ServiceAccount's identity (a real token from the TokenRequest API, so
  the API server authorizes exactly what the pod would be authorized), and reconciles jobs to
  Succeeded, records Events, creates a TensorBoard Deployment, deletes a job by TTL and applies
  the chart's controller config: the RBAC is enough. The same identity is refused Secrets and
  everything else it does not need: the RBAC is not broad.
- ``helm upgrade`` to two replicas and one watched namespace swaps the ClusterRole for a Role,
  adds the Lease Role, and the operator (leader-elected) still works as that identity.
- ``helm uninstall`` removes every object of the release (the CRDs stay, as Helm documents).
- Invalid values are refused by values.schema.json with a message naming the value.

Helm comes from ``scripts/get-helm.sh`` (built from the Go module proxy, cached); a failure to
get it fails the tests, it never skips them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    ControlPlane,
    Kueue,
    condition_true,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
)
from trainjobs.testing._kueue_objects import workloads_owned_by

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "trainjobs"
GET_HELM = REPO / "scripts" / "get-helm.sh"
STANDARD_LABELS = ("name", "instance", "version", "component", "part-of", "managed-by")
KUEUE_RBAC_OFF = "Kueue serves Workloads but this operator may not read them"
RESTRICTED = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")
}
# The `helm test` pod ends with exit code 0 on KWOK's fake nodes (there is no kubelet to run
# its real check; see trainjobs/testing/kwok_stages.yaml).
KWOK_TEST_POD = {"helmTest": {"podAnnotations": {EXIT_CODE_ANNOTATION: "0"}}}
ACCELERATORS = {
    "accelerators": {
        "nvidia.com/gpu": {
            "volumes": [
                {
                    "name": "nvidia-libs",
                    "mountPath": "/usr/local/nvidia/lib64",
                    "hostPath": "/opt/nvidia/lib64",
                }
            ],
            "envVars": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
        }
    }
}
T = TypeVar("T")


REFUSED = re.compile(r"\b403\b|forbidden", re.I)


def without_timestamp(line: str) -> str:
    """A JSON log line less its "time" field, whose milliseconds can read "403"."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict):
        return line
    record.pop("time", None)
    return json.dumps(record)


def wait_for(
    check: Callable[[], T | None], what: str, timeout: float = 60.0, interval: float = 0.2
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- helm ------------------------------------------------------------------------------------


@dataclass
class Helm:
    """The helm binary with a private config/cache/data home and the test kubeconfig."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "KUBECONFIG"))}
        env.update(
            HELM_CONFIG_HOME=str(self.home / "config"),
            HELM_CACHE_HOME=str(self.home / "cache"),
            HELM_DATA_HOME=str(self.home / "data"),
        )
        argv = [str(self.binary), *args]
        if self.kubeconfig is not None:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        result = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr}{result.stdout[-2000:]}"
            )
        return result

    def template(
        self, release: str, namespace: str, values: dict[str, Any] | None = None, *extra: str
    ) -> list[dict[str, Any]]:
        out = self(
            "template",
            release,
            str(CHART),
            f"--namespace={namespace}",
            *values_args(self.home, values),
            *extra,
        ).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


def values_args(home: Path, values: dict[str, Any] | None) -> list[str]:
    """`-f FILE` for a values dict (written as YAML, as a user would)."""
    if not values:
        return []
    path = home / f"values-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return [f"--values={path}"]


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """Helm from scripts/get-helm.sh (built once into the cache); fails, never skips."""
    result = subprocess.run(
        ["bash", str(GET_HELM)], capture_output=True, text=True, timeout=1800, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"{GET_HELM} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    path = Path(result.stdout.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        pytest.fail(f"{GET_HELM} printed {path}, which is not an executable")
    return path


@pytest.fixture(scope="session")
def helm_offline(helm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """Helm for lint and template (no cluster)."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-offline"))


@pytest.fixture(scope="session")
def helm(
    helm_binary: Path, kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Helm:
    """Helm talking to the test control plane as its admin."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm"), kube_cluster.kubeconfig)


# -- cluster helpers -------------------------------------------------------------------------


def create_namespace(
    cluster: ControlPlane, name: str, labels: dict[str, str] | None = None
) -> None:
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": labels or {}},
            }
        ),
    )


@contextlib.contextmanager
def namespaces(cluster: ControlPlane, *names: str, restricted: bool = True) -> Iterator[None]:
    for name in names:
        create_namespace(cluster, name, RESTRICTED if restricted else None)
    try:
        yield
    finally:
        for name in names:
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@contextlib.contextmanager
def explained(cluster: ControlPlane, *names: str) -> Iterator[None]:
    """On a failed assertion, add what the namespaces hold (workloads, pods, events)."""
    try:
        yield
    except AssertionError as exc:
        state = []
        for ns in names:
            for what in (
                ["get", "deployments,replicasets,pods,leases", "-o", "wide"],
                ["get", "events", "--sort-by=.lastTimestamp"],
            ):
                out = cluster.kubectl(*what, "-n", ns, check=False)
                state.append(f"$ kubectl {' '.join(what)} -n {ns}\n{out.stdout}{out.stderr}")
        raise AssertionError(f"{exc}\n\n" + "\n".join(state)) from None


def get_json(cluster: ControlPlane, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def exists(cluster: ControlPlane, *args: str) -> bool:
    result = cluster.kubectl("get", *args, "--ignore-not-found", "-o", "name", check=False)
    assert result.returncode == 0, result.stderr
    return bool(result.stdout.strip())


def dry_run_server(cluster: ControlPlane, tmp: Path, docs: list[dict[str, Any]]) -> str:
    """`kubectl apply --dry-run=server` of every manifest; returns kubectl's stderr."""
    path = tmp / f"manifests-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = cluster.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    assert result.returncode == 0, f"server dry-run refused the chart:\n{result.stderr}"
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(docs), result.stdout
    return result.stderr


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    result: dict[str, Any] = containers[0]
    return result


def rbac_grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """Rules flattened to (apiGroup, resource, verb, resourceName or '')."""
    grants = set()
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    for name in rule.get("resourceNames") or [""]:
                        grants.add((group, resource, verb, name))
    return grants


JOB_PLURALS = ("mxjobs", "tfjobs", "caffe2jobs")
#: Exactly what trainjobs/operator/{informer,controller,events}.py call (see docs/helm.md).
OPERATOR_GRANTS = (
    {("trainjobs.io", p, v, "") for p in JOB_PLURALS for v in ("list", "watch", "delete")}
    | {("trainjobs.io", f"{p}/status", "patch", "") for p in JOB_PLURALS}
    | {("trainjobs.io", f"{p}/finalizers", "update", "") for p in JOB_PLURALS}
    | {("", r, v, "") for r in ("pods", "services")
       for v in ("list", "watch", "get", "create", "delete")}
    | {("apps", "deployments", v, "") for v in ("list", "watch", "get", "create")}
    | {("", "events", "create", "")}
)


def lease_grants(name: str) -> set[tuple[str, str, str, str]]:
    """What trainjobs/operator/leader.py calls on its one Lease."""
    return {
        ("coordination.k8s.io", "leases", "create", ""),
        ("coordination.k8s.io", "leases", "get", name),
        ("coordination.k8s.io", "leases", "update", name),
    }


# -- the operator as a local process ---------------------------------------------------------


def service_account_kubeconfig(cluster: ControlPlane, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig with a real token of `sa` (TokenRequest API), as an in-cluster pod has.

    Not an impersonating kubeconfig (`as:`): the operator's kubeconfig loader ignores `as`, so
    the operator would silently run as the admin and prove nothing about the chart's RBAC.
    """
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [
            {
                "name": sa,
                "context": {
                    "cluster": admin["clusters"][0]["name"],
                    "user": sa,
                    "namespace": namespace,
                },
            }
        ],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    whoami = cluster.kubectl("auth", "whoami", f"--kubeconfig={path}", "-o", "json")
    user = json.loads(whoami.stdout)["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{namespace}:{sa}"
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Operator:
    """`python -m trainjobs.cli <the Deployment's args>` on this machine."""

    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    argv: list[str] = field(default_factory=list)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def readyz(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"operator exited {self.proc.returncode}:\n{self.log_text()[-4000:]}"
            )
        try:
            url = f"http://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode


@contextlib.contextmanager
def run_operator(
    cluster: ControlPlane, release: str, namespace: str, sa: str, tmp: Path
) -> Iterator[Operator]:
    """Run the operator with the args of the installed Deployment, as the chart's SA.

    The in-cluster paths are swapped for local ones: --http-address goes to a free loopback
    port, and --controller-config-file to a copy of the release's ConfigMap.
    """
    deployment = get_json(cluster, "deployment", release_fullname(release), "-n", namespace)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = list(container["args"])
    assert args[0] == "operator"
    kubeconfig = service_account_kubeconfig(cluster, namespace, sa, tmp / f"{sa}.kubeconfig")
    port = free_port()
    local: list[str] = []
    for arg in args:
        if arg.startswith("--http-address="):
            arg = f"--http-address=127.0.0.1:{port}"
        elif arg.startswith("--controller-config-file="):
            in_pod = Path(arg.split("=", 1)[1])
            mount = next(
                m for m in container["volumeMounts"] if m["mountPath"] == str(in_pod.parent)
            )
            volume = next(
                v
                for v in deployment["spec"]["template"]["spec"]["volumes"]
                if v["name"] == mount["name"]
            )
            cm = get_json(cluster, "configmap", volume["configMap"]["name"], "-n", namespace)
            copy = tmp / in_pod.name
            copy.write_text(cm["data"][in_pod.name])
            arg = f"--controller-config-file={copy}"
        local.append(arg)
    argv = [sys.executable, "-m", "trainjobs.cli", *local, f"--kubeconfig={kubeconfig}"]
    log = tmp / f"operator-{uuid.uuid4().hex[:6]}.log"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp, start_new_session=True
        )
    operator = Operator(proc, log, port, argv)
    try:
        wait_for(operator.readyz, "the operator's /readyz", timeout=60)
        yield operator
    finally:
        code = operator.stop()
        text = operator.log_text()
        assert code == 0, f"operator exited {code} on SIGTERM:\n{text[-4000:]}"
    # With the chart's default kueue.enabled=false on a cluster that serves Kueue (an earlier
    # test may have installed it), the operator's one warning that Kueue admission is off is the
    # documented behaviour, not a refused call of its work.
    denied = [line for line in text.splitlines()
              if REFUSED.search(without_timestamp(line)) and KUEUE_RBAC_OFF not in line]
    assert not denied, "the operator was refused API calls:\n" + "\n".join(denied[:20])


def release_fullname(release: str) -> str:
    return release if "trainjobs" in release else f"{release}-trainjobs"


def job_manifest(
    kind: str, name: str, replica_specs: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "trainjobs.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"replicaSpecs": replica_specs, **spec},
    }


def replica(
    container: str, replicas: int = 1, exit_code: str | None = None, **container_fields: Any
) -> dict[str, Any]:
    annotations = {RUN_DURATION_ANNOTATION: "1s"}
    if exit_code is not None:
        annotations[EXIT_CODE_ANNOTATION] = exit_code
    return {
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {
                "containers": [
                    {"name": container, "image": "example.invalid/train:1", **container_fields}
                ]
            },
        },
    }


def mxjob(name: str) -> dict[str, Any]:
    """Scheduler and Server run until cleaned up; both Workers exit 0 after a second."""
    return job_manifest(
        "MxJob",
        name,
        {
            "Scheduler": replica("mxnet"),
            "Server": replica("mxnet"),
            "Worker": replica("mxnet", replicas=2, exit_code="0"),
        },
        runPolicy={"cleanPodPolicy": "Running"},
    )


def apply(cluster: ControlPlane, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def wait_succeeded(cluster: ControlPlane, namespace: str, ref: str, timeout: float = 90) -> None:
    """Wait for the job's Succeeded condition; fail at once if it Failed."""

    def finished() -> dict[str, Any] | None:
        job: dict[str, Any] = get_json(cluster, ref, "-n", namespace)
        conditions = (job.get("status") or {}).get("conditions") or []
        done = {c["type"] for c in conditions if c.get("status") == "True"}
        return job if done & {"Succeeded", "Failed"} else None

    job = wait_for(finished, f"{ref} to finish", timeout=timeout, interval=0.5)
    assert job["status"]["state"] == "Succeeded", yaml.safe_dump(job["status"])


def can_i(
    cluster: ControlPlane, identity: str, verb: str, resource: str, namespace: str | None
) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    resource, _, sub = resource.partition("/")
    subresource = [f"--subresource={sub}"] if sub else []
    result = cluster.kubectl(
        "auth", "can-i", verb, resource, *subresource, *scope, f"--as={identity}", check=False
    )
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"


# -- static: lint, versions, CRDs ------------------------------------------------------------


def test_helm_lint_strict_is_clean(helm_offline: Helm) -> None:
    for values in (
        {},
        {
            "replicaCount": 2,
            "watchNamespaces": ["a", "b"],
            "logFormat": "json",
            "controllerConfig": ACCELERATORS,
            "podDisruptionBudget": {"enabled": True},
            "serviceMonitor": {"enabled": True},
        },
    ):
        result = helm_offline(
            "lint", "--strict", str(CHART), *values_args(helm_offline.home, values)
        )
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_chart_versions_follow_pyproject_and_crds_match_the_repository() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == project["version"]
    assert chart["appVersion"] == project["version"]
    repo = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    ours = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert repo and ours == repo, "charts/trainjobs/crds/ differs from crds/: make crds"
    for name in repo:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes(), (
            f"charts/trainjobs/crds/{name} is stale: run `cp crds/*.yaml charts/trainjobs/crds/`"
            " (make crds)"
        )


# -- static: what the templates render -------------------------------------------------------


def test_default_render_is_secure_labelled_and_least_privilege(helm_offline: Helm) -> None:
    docs = helm_offline.template("rel", "ops")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Pod",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for doc in docs:
        labels = doc["metadata"]["labels"]
        for key in STANDARD_LABELS:
            assert labels.get(f"app.kubernetes.io/{key}"), (doc["kind"], key)
        assert labels["app.kubernetes.io/version"] == chart["appVersion"]
        assert labels["app.kubernetes.io/part-of"] == "trainjobs"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"

    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(docs)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert container["image"] == f"trainjobs/operator:{chart['appVersion']}"
    assert container["args"] == [
        "operator",
        "--http-address=0.0.0.0:8080",
        "--concurrency=16",
        "--log-format=text",
        "--log-level=info",
        "--status-coalesce=1",
        "--gc-thaw-interval=3600",
        "--request-timeout=30",
        "--max-replicas-per-job=2000",
        "--ready-api-timeout=10",
    ]
    assert pod["serviceAccountName"] == "rel-trainjobs"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert container["resources"]["requests"] and container["resources"]["limits"]

    service = one(docs, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["name"] == "http-metrics"
    # Every selector label is on the pod template; the helm test pod is not selected.
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()
    test_pod = one(docs, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert not service["spec"]["selector"].items() <= test_pod["metadata"]["labels"].items()
    assert "/readyz" in " ".join(test_pod["spec"]["containers"][0]["command"])
    assert "rel-trainjobs-metrics.ops.svc:8080" in test_pod["spec"]["containers"][0]["command"][2]

    role = one(docs, "ClusterRole")
    assert rbac_grants(role["rules"]) == OPERATOR_GRANTS
    assert not any("*" in str(rule) for rule in role["rules"])
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-trainjobs", "namespace": "ops"}
    ]


def test_non_default_render(helm_offline: Helm) -> None:
    docs = helm_offline.template(
        "rel",
        "ops",
        {
            "replicaCount": 2,
            "watchNamespaces": ["team-a", "team-b"],
            "logFormat": "json",
            "logLevel": "debug",
            "concurrency": 4,
            "image": {"tag": "dev"},
            "controllerConfig": ACCELERATORS,
            "podDisruptionBudget": {"enabled": True},
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
            "rbac": {"extraJobResources": ["pytorchjobs"]},
        },
    )
    container = operator_container(docs)
    assert container["image"] == "trainjobs/operator:dev"
    args = container["args"]
    for arg in (
        "--log-format=json",
        "--log-level=debug",
        "--concurrency=4",
        "--namespace=team-a",
        "--namespace=team-b",
        "--leader-elect",
        "--leader-election-namespace=ops",
        "--leader-election-id=rel-trainjobs",
        "--controller-config-file=/etc/trainjobs/controller-config.yaml",
    ):
        assert arg in args, (arg, args)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "checksum/controller-config" in deployment["spec"]["template"]["metadata"]["annotations"]

    # The controller config: a ConfigMap, mounted where the argument points.
    cm = one(docs, "ConfigMap")
    assert yaml.safe_load(cm["data"]["controller-config.yaml"]) == ACCELERATORS
    mount = next(m for m in container["volumeMounts"] if m["name"] == "controller-config")
    assert mount["mountPath"] == "/etc/trainjobs" and mount["readOnly"] is True

    # One namespace-scoped grant per watched namespace, nothing cluster-wide.
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind(docs, "Role")}
    extra = {("trainjobs.io", "pytorchjobs", v, "") for v in ("list", "watch", "delete")} | {
        ("trainjobs.io", "pytorchjobs/status", "patch", ""),
        ("trainjobs.io", "pytorchjobs/finalizers", "update", ""),
    }
    for ns in ("team-a", "team-b"):
        assert rbac_grants(roles[(ns, "rel-trainjobs")]["rules"]) == OPERATOR_GRANTS | extra
    assert rbac_grants(roles[("ops", "rel-trainjobs-leader-election")]["rules"]) == lease_grants(
        "rel-trainjobs"
    )
    bindings = {
        (b["metadata"]["namespace"], b["roleRef"]["name"]) for b in by_kind(docs, "RoleBinding")
    }
    assert bindings == {
        ("team-a", "rel-trainjobs"),
        ("team-b", "rel-trainjobs"),
        ("ops", "rel-trainjobs-leader-election"),
    }

    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items()
        <= one(docs, "Service")["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "http-metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_leader_election_can_be_enabled_with_one_replica(helm_offline: Helm) -> None:
    docs = helm_offline.template(
        "trainjobs",
        "ops",
        {"leaderElection": {"enabled": True, "namespace": "leases", "id": "my-lease"}},
    )
    args = operator_container(docs)["args"]
    assert "--leader-elect" in args and "--leader-election-namespace=leases" in args
    assert "--leader-election-id=my-lease" in args
    role = next(r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] == "leases")
    assert rbac_grants(role["rules"]) == lease_grants("my-lease")
    # The release name already holds the chart name: no "trainjobs-trainjobs".
    assert one(docs, "Deployment")["metadata"]["name"] == "trainjobs"


@pytest.mark.parametrize(("scheduler", "group"), [("coscheduling", "scheduling.x-k8s.io"),
                                                  ("volcano", "scheduling.volcano.sh")])
def test_gang_scheduling_grants_the_schedulers_podgroups(helm_offline: Helm, scheduler: str,
                                                         group: str) -> None:
    config = {"gangScheduling": {"scheduler": scheduler}}
    docs = helm_offline.template("rel", "ops", {"controllerConfig": config})
    # What the controller calls for a watched kind: list, watch, create, delete.
    podgroups = {(group, "podgroups", v, "") for v in ("list", "watch", "create", "delete")}
    assert rbac_grants(one(docs, "ClusterRole")["rules"]) == OPERATOR_GRANTS | podgroups
    assert yaml.safe_load(one(docs, "ConfigMap")["data"]["controller-config.yaml"]) == config


#: What kueue.enabled adds to the operator's (Cluster)Role: operator/gates/kueue.py's calls.
WORKLOAD_GRANTS = ({("kueue.x-k8s.io", "workloads", v, "")
                    for v in ("list", "watch", "create", "patch", "delete")}
                   | {("kueue.x-k8s.io", "workloads/status", "patch", "")})
#: A MultiKueue manager's values (docs/multikueue.md, "The chart in a manager cluster").
MANAGER_VALUES = {"kueue": {"enabled": True}, "multiKueue": {"manager": True}}


def test_kueue_grants_exactly_what_the_admission_calls(helm_offline: Helm) -> None:
    """kueue.enabled: the Workloads the operator creates, patches (and their status) and
    deletes, in the namespaces it watches; the cluster-scoped reads its caches list and watch
    (operator/gates/kueue.py), bound cluster-wide also when it watches given namespaces; and the
    queue-name policy."""
    workloads = WORKLOAD_GRANTS
    reads = {(g, r, v, "") for g, r in (("kueue.x-k8s.io", "resourceflavors"),
                                        ("kueue.x-k8s.io", "workloadpriorityclasses"),
                                        ("scheduling.k8s.io", "priorityclasses"))
             for v in ("list", "watch")}
    docs = helm_offline.template("rel", "ops", {"kueue": {"enabled": True}})
    roles = {d["metadata"]["name"]: rbac_grants(d["rules"]) for d in by_kind(docs, "ClusterRole")}
    assert roles == {"rel-trainjobs": OPERATOR_GRANTS | workloads, "rel-trainjobs-kueue": reads}
    docs = helm_offline.template("rel", "ops", {"kueue": {"enabled": True},
                                                "watchNamespaces": ["a", "b"]})
    assert {d["metadata"]["namespace"]: rbac_grants(d["rules"]) for d in by_kind(docs, "Role")
            } == {"a": OPERATOR_GRANTS | workloads, "b": OPERATOR_GRANTS | workloads}
    assert [rbac_grants(d["rules"]) for d in by_kind(docs, "ClusterRole")] == [reads]
    policies = {d["metadata"]["name"] for d in by_kind(docs, "ValidatingAdmissionPolicy")}
    assert "rel-trainjobs-kueue-queue-name" in policies
    off = helm_offline.template("rel", "ops", {})
    assert not any("kueue" in d["metadata"]["name"] for d in off)


def test_kueue_kubeflow_integration_render(helm_offline: Helm) -> None:
    """kueue.enabled: --kueue-kubeflow-integration (auto by default) and, with auto,
    --kueue-config-map; with kubeflow.enabled too, a Role in Kueue's namespace that reads
    exactly that ConfigMap (operator/kueue_integrations.py's one GET), bound to the operator.
    No Role with an explicit mode or without kubeflow.enabled (invalid values: below)."""
    both = {"kueue": {"enabled": True}, "kubeflow": {"enabled": True}}

    def config_roles(docs: list[dict[str, Any]], kind: str = "Role") -> dict[str, Any]:
        return {d["metadata"]["namespace"]: d for d in by_kind(docs, kind)
                if d["metadata"]["name"] == "rel-trainjobs-kueue-config"}

    docs = helm_offline.template("rel", "ops", both)
    args = operator_container(docs)["args"]
    assert "--kueue-kubeflow-integration=auto" in args
    assert "--kueue-config-map=kueue-system/kueue-manager-config" in args
    (role,) = config_roles(docs).values()
    assert role["metadata"]["namespace"] == "kueue-system"
    assert rbac_grants(role["rules"]) == {("", "configmaps", "get", "kueue-manager-config")}
    (binding,) = config_roles(docs, "RoleBinding").values()
    assert binding["roleRef"]["name"] == "rel-trainjobs-kueue-config"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-trainjobs",
                                    "namespace": "ops"}]
    moved = helm_offline.template("rel", "ops", {**both, "kueue": {
        "enabled": True, "configMap": "queueing/kueue-config"}})
    assert "--kueue-config-map=queueing/kueue-config" in operator_container(moved)["args"]
    assert rbac_grants(config_roles(moved)["queueing"]["rules"]) == {
        ("", "configmaps", "get", "kueue-config")}
    said = helm_offline.template("rel", "ops", {**both, "kueue": {
        "enabled": True, "kubeflowIntegration": "operator"}})
    args = operator_container(said)["args"]
    assert "--kueue-kubeflow-integration=operator" in args
    assert not [a for a in args if a.startswith("--kueue-config-map")]
    assert not config_roles(said)
    assert not config_roles(helm_offline.template("rel", "ops", {"kueue": {"enabled": True}}))
    off = operator_container(helm_offline.template("rel", "ops", {}))["args"]
    assert not [a for a in off if a.startswith("--kueue-")]


def test_multikueue_manager_render(helm_offline: Helm) -> None:
    """multiKueue.manager: the operator gets --multikueue-manager; its Role reads pods,
    Services and Deployments but may create or delete none (a manager runs no job), the rest
    as with kueue.enabled; the manager policy and its binding are rendered. Off by default."""
    docs = helm_offline.template("rel", "ops", MANAGER_VALUES)
    assert "--multikueue-manager" in operator_container(docs)["args"]
    writes = ({("", r, v, "") for r in ("pods", "services") for v in ("create", "delete")}
              | {("apps", "deployments", "create", "")})
    roles = {d["metadata"]["name"]: rbac_grants(d["rules"]) for d in by_kind(docs, "ClusterRole")}
    assert roles["rel-trainjobs"] == (OPERATOR_GRANTS - writes) | WORKLOAD_GRANTS
    policies = [(d["kind"], d["metadata"]["name"]) for d in docs
                if d["kind"].startswith("ValidatingAdmissionPolicy")
                and "multikueue" in d["metadata"]["name"]]
    assert policies == [("ValidatingAdmissionPolicy", "rel-trainjobs-multikueue-manager"),
                        ("ValidatingAdmissionPolicyBinding", "rel-trainjobs-multikueue-manager")]
    gang = helm_offline.template("rel", "ops", {**MANAGER_VALUES, "controllerConfig": {
        "gangScheduling": {"scheduler": "volcano"}}})
    role = next(d for d in by_kind(gang, "ClusterRole") if d["metadata"]["name"] == "rel-trainjobs")
    podgroups = {g for g in rbac_grants(role["rules"]) if g[1] == "podgroups"}
    assert podgroups == {("scheduling.volcano.sh", "podgroups", v, "") for v in ("list", "watch")}
    default = helm_offline.template("rel", "ops", {"kueue": {"enabled": True}})
    assert "--multikueue-manager" not in operator_container(default)["args"]
    assert not any("multikueue" in d["metadata"]["name"] for d in default)


def test_progress_render(helm_offline: Helm, tmp_path: Path) -> None:
    """progress.enabled: the endpoint's flags, port and TLS mount on the operator, its Service,
    a CA and a certificate for the Service's DNS names (verified here with openssl), and the
    one grant it adds, creating TokenReviews; with the user's Secret, no Secret is made. Off
    (the default): none of it, not a word of progress in the manifests."""
    docs = helm_offline.template("rel", "ops", {"progress": {"enabled": True}})
    args = operator_container(docs)["args"]
    tls = "/etc/trainjobs/progress-tls"
    assert {"--progress-listen=0.0.0.0:8443", f"--progress-tls-cert={tls}/tls.crt",
            f"--progress-tls-key={tls}/tls.key", f"--progress-ca-file={tls}/ca.crt",
            "--progress-url=https://rel-trainjobs-progress.ops.svc:8443/v1/progress",
            "--progress-interval=5"} <= set(args)
    ports = {p["name"]: p["containerPort"] for p in operator_container(docs)["ports"]}
    assert ports["progress"] == 8443
    service = next(d for d in by_kind(docs, "Service") if d["metadata"]["name"] ==
                   "rel-trainjobs-progress")
    assert service["spec"]["ports"] == [{"name": "progress", "port": 8443,
                                         "targetPort": "progress", "protocol": "TCP"}]
    roles = {d["metadata"]["name"]: rbac_grants(d["rules"]) for d in by_kind(docs, "ClusterRole")}
    assert roles["rel-trainjobs-progress"] == {("authentication.k8s.io", "tokenreviews",
                                                 "create", "")}
    assert roles["rel-trainjobs"] == OPERATOR_GRANTS
    secret = one(docs, "Secret")
    assert secret["metadata"]["name"] == "rel-trainjobs-progress-tls"
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"),
                             "-verify_hostname", "rel-trainjobs-progress.ops.svc",
                             str(tmp_path / "tls.crt")], capture_output=True, text=True,
                            check=False)
    assert verify.returncode == 0, verify.stderr + verify.stdout
    given = helm_offline.template("rel", "ops", {"progress": {
        "enabled": True, "tls": {"secretName": "mine", "caKey": ""}}})
    assert by_kind(given, "Secret") == []
    volume = next(v for v in one(given, "Deployment")["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "progress-tls")
    assert volume["secret"]["secretName"] == "mine"
    assert not any(a.startswith("--progress-ca-file") for a in operator_container(given)["args"])
    off = helm_offline.template("rel", "ops", {})
    assert "progress" not in json.dumps(off)


@contextlib.contextmanager
def queue_and_release(helm: Helm, kube_cluster: ControlPlane, kube_namespace: str,
                      release: str, flavor: str) -> Iterator[str]:
    """A namespace for the release (restricted Pod Security), a ResourceFlavor `flavor` with a
    ClusterQueue of 4 CPU and the LocalQueue ``queue`` in the jobs' namespace; yields the
    release's namespace. After: the jobs, the release, its namespace and the queue go."""
    ns = unique("helm-q")
    create_namespace(kube_cluster, ns, RESTRICTED)
    create_resource_flavor(kube_cluster, flavor)
    create_cluster_queue(kube_cluster, flavor, quotas={flavor: {"cpu": "4"}})
    create_local_queue(kube_cluster, kube_namespace, "queue", flavor)
    try:
        yield ns
    finally:
        kube_cluster.kubectl("-n", kube_namespace, "delete", "tfjobs", "--all",
                             "--wait=true", check=False, timeout=60)
        helm("uninstall", release, f"--namespace={ns}", "--wait", "--timeout=60s", check=False)
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        kube_cluster.kubectl("-n", kube_namespace, "delete", "localqueue", "queue",
                             "--ignore-not-found", check=False)
        for kind in ("clusterqueue", "resourceflavor"):
            kube_cluster.kubectl("delete", kind, flavor, "--ignore-not-found", "--wait=true",
                                 check=False, timeout=60)


def test_multikueue_manager_on_the_api_server(
        helm: Helm, kube_cluster: ControlPlane, kueue: Kueue, kube_namespace: str,
        tmp_path: Path) -> None:
    """The manager mode installed: the API server refuses a job not managed by MultiKueue, or
    without a queue, naming what to set; the operator, as the chart's ServiceAccount with the
    Deployment's arguments, creates the Workload of a job managed by MultiKueue, creates no pod
    and is refused nothing (run_operator fails on any 403)."""
    name, flavor = unique("tjm"), unique("hm")

    def tfjob(job: str, managed: bool, queue: bool) -> dict[str, Any]:
        manifest = job_manifest("TfJob", job, {"Worker": replica(
            "tensorflow", exit_code="0", resources={"requests": {"cpu": "1"}})})
        if managed:
            manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        if queue:
            manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "queue"}
        return manifest

    def create(manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return kube_cluster.kubectl("create", "-n", kube_namespace, "-f", "-",
                                    input=json.dumps(manifest), check=False)

    with queue_and_release(helm, kube_cluster, kube_namespace, name, flavor) as ns:
        helm("install", name, str(CHART), f"--namespace={ns}", "--wait", "--timeout=120s",
             *values_args(helm.home, {**MANAGER_VALUES, **KWOK_TEST_POD}))
        tries = iter(range(1000))

        def refusal() -> subprocess.CompletedProcess[str] | None:
            # A new name each try: one created before the policy loaded stays.
            result = create(tfjob(f"local-{next(tries)}", managed=False, queue=True))
            return result if result.returncode != 0 else None

        refused = wait_for(refusal, "the manager policy to refuse a local job", timeout=30)
        assert ("this is a MultiKueue manager cluster: no job runs here, Kueue dispatches each "
                "to a worker cluster; set spec.managedBy to kueue.x-k8s.io/multikueue (it is "
                "unset)") in refused.stderr, refused.stderr
        unqueued = create(tfjob("unqueued", managed=True, queue=False))
        assert unqueued.returncode != 0
        assert "a job needs the kueue.x-k8s.io/queue-name label" in unqueued.stderr, unqueued
        for early in range(next(tries)):  # accepted before the policy loaded, if any
            kube_cluster.kubectl("delete", "-n", kube_namespace, "tfjob", f"local-{early}",
                                 "--ignore-not-found", "--wait=false", check=False)
        assert create(tfjob("remote", managed=True, queue=True)).returncode == 0
        uid = get_json(kube_cluster, "tfjob", "remote", "-n", kube_namespace)["metadata"]["uid"]
        with run_operator(kube_cluster, name, ns, f"{name}-trainjobs", tmp_path) as operator:
            wait_for(lambda: workloads_owned_by(kube_cluster, kube_namespace, uid),
                     "the operator to create the job's Workload", timeout=60)
            wait_for(lambda: "is managed by kueue.x-k8s.io/multikueue" in operator.log_text(),
                     "the operator to say it leaves the job alone", timeout=30)
            time.sleep(3)  # a pod created on admission would show by now
            pods = get_json(kube_cluster, "pods", "-n", kube_namespace)["items"]
            assert pods == [], [p["metadata"]["name"] for p in pods]
            assert operator.readyz()
            # Deleted, the job's Workload goes too (the operator releases Kueue's finalizer).
            kube_cluster.kubectl("-n", kube_namespace, "delete", "tfjob", "remote",
                                 "--wait=true", timeout=60)
            wait_for(lambda: not workloads_owned_by(kube_cluster, kube_namespace, uid),
                     "the deleted job's Workload to go", timeout=60)


# -- server-side dry run of the rendered manifests -------------------------------------------


NON_DEFAULT = {
    "replicaCount": 2,
    "logFormat": "json",
    "logLevel": "warning",
    "controllerConfig": ACCELERATORS,
    "serviceMonitor": {"enabled": False},
    "podDisruptionBudget": {"enabled": True},
}


@pytest.mark.parametrize("case", ["default", "non-default", "longest-release-name"])
def test_rendered_manifests_pass_server_dry_run(
    case: str, helm: Helm, kube_cluster: ControlPlane, tmp_path: Path
) -> None:
    ns, watched = unique("helm-dry"), unique("helm-watched")
    release = unique("rel")
    values: dict[str, Any] = {}
    if case == "non-default":
        values = {**NON_DEFAULT, "watchNamespaces": [watched]}
    elif case == "longest-release-name":  # Helm allows 53 characters; names stay valid
        release = unique("r" * 44)
        values = {"replicaCount": 2}
    docs = helm.template(release, ns, values)
    expected = {"Deployment", "ServiceAccount", "Service", "Pod", "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"} | (
        {"Role", "RoleBinding", "ConfigMap", "PodDisruptionBudget"}
        if case == "non-default"
        else {"ClusterRole", "ClusterRoleBinding"}
    )
    if case == "longest-release-name":
        expected |= {"Role", "RoleBinding"}  # leader election
    assert {d["kind"] for d in docs} == expected
    with namespaces(kube_cluster, ns, watched):
        warnings = dry_run_server(kube_cluster, tmp_path, docs)
    # The namespaces enforce and warn on the "restricted" Pod Security Standard.
    assert "PodSecurity" not in warnings, warnings


# -- install, operate, refuse, upgrade, uninstall --------------------------------------------


@dataclass
class Release:
    name: str
    namespace: str
    sa: str
    fullname: str


@pytest.fixture(scope="module")
def installed(helm: Helm, kube_cluster: ControlPlane) -> Iterator[Release]:
    """A release with the default values plus a controller config, cluster-wide."""
    name, ns = unique("tj"), unique("helm-install")
    create_namespace(kube_cluster, ns, RESTRICTED)
    values = {"controllerConfig": ACCELERATORS, **KWOK_TEST_POD}
    try:
        with explained(kube_cluster, ns):
            helm(
                "install",
                name,
                str(CHART),
                f"--namespace={ns}",
                "--wait",
                "--timeout=120s",
                *values_args(helm.home, values),
            )
        yield Release(name, ns, f"{name}-trainjobs", f"{name}-trainjobs")
    finally:
        helm("uninstall", name, f"--namespace={ns}", "--wait", "--timeout=60s", check=False)
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_install_creates_everything_and_helm_test_passes(
    installed: Release, helm: Helm, kube_cluster: ControlPlane
) -> None:
    ns, full = installed.namespace, installed.fullname
    for ref in (
        f"deployment/{full}",
        f"serviceaccount/{full}",
        f"service/{full}-metrics",
        f"configmap/{full}-config",
    ):
        assert exists(kube_cluster, ref, "-n", ns), ref
    for ref in (f"clusterrole/{full}", f"clusterrolebinding/{full}"):
        assert exists(kube_cluster, ref), ref
    # The chart's crds/ are installed (or were already) and serve.
    for plural in JOB_PLURALS:
        kube_cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{plural}.trainjobs.io"
        )
    status = json.loads(helm("status", installed.name, f"--namespace={ns}", "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    notes = status["info"]["notes"]
    assert f"kubectl -n {ns} rollout status deployment/{full}" in notes, notes
    assert f"ConfigMap {full}-config" in notes and "all namespaces" in notes, notes
    # Plainly: the default image is not published; how to build and push it; the example
    # job's image is a placeholder; the log shows the jobs' state changes.
    assert "no trainjobs operator image is published yet" in notes, notes
    assert "make image" in notes and "skopeo copy oci-archive:dist/trainjobs-operator-" in notes
    assert "placeholder" in notes and "one line per job state change" in notes, notes
    # The Deployment's pods were admitted under the "restricted" Pod Security Standard.
    deployment = get_json(kube_cluster, "deployment", full, "-n", ns)
    assert deployment["status"].get("readyReplicas") == 1
    result = helm("test", installed.name, f"--namespace={ns}", "--timeout=90s")
    assert re.search(r"TEST SUITE:\s+\S+-test-readyz", result.stdout), result.stdout
    assert "Phase:          Succeeded" in result.stdout, result.stdout


def test_operator_as_the_chart_service_account_reconciles_jobs(
    installed: Release, kube_cluster: ControlPlane, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    with run_operator(
        kube_cluster, installed.name, installed.namespace, installed.sa, tmp_path
    ) as operator:
        # list/watch jobs, pods, services; create pods and services; patch status; events.
        apply(kube_cluster, ns, mxjob("mnist"))
        wait_succeeded(kube_cluster, ns, "mxjob/mnist")
        # cleanPodPolicy Running: the operator deleted the scheduler's and server's pods.
        wait_for(
            lambda: (
                not get_json(
                    kube_cluster,
                    "pods",
                    "-n",
                    ns,
                    "-l",
                    "trainjobs.io/job-name=mnist,trainjobs.io/replica-type in (scheduler,server)",
                )["items"]
            ),
            "the running pods of a finished job to be deleted",
        )
        events = get_json(
            kube_cluster, "events", "-n", ns, "--field-selector=involvedObject.name=mnist"
        )["items"]
        assert any(e.get("reportingComponent") == "trainjobs-operator" for e in events), (
            f"no Event from the operator on mxjob/mnist: {events}"
        )

        # create deployments (TensorBoard) and delete jobs (ttlSecondsAfterFinished).
        apply(
            kube_cluster,
            ns,
            job_manifest(
                "TfJob",
                "board",
                {"Worker": replica("tensorflow", exit_code="0")},
                tensorboard={"logDir": "/logs"},
                runPolicy={"ttlSecondsAfterFinished": 2},
            ),
        )
        wait_for(
            lambda: exists(kube_cluster, "deployment/board-tensorboard", "-n", ns),
            "the TensorBoard Deployment",
        )
        kube_cluster.kubectl(
            "wait", "-n", ns, "--for=delete", "tfjob/board", "--timeout=90s", timeout=100
        )

        # The chart's controllerConfig reached the operator: a GPU container gets its volume
        # and variable (the pod stays Pending: the fake nodes have no GPUs).
        apply(
            kube_cluster,
            ns,
            job_manifest(
                "Caffe2Job",
                "gpu",
                {"Worker": replica("caffe2", resources={"limits": {"nvidia.com/gpu": "1"}})},
            ),
        )
        pod = wait_for(
            lambda: get_json(kube_cluster, "pods", "-n", ns, "-l", "trainjobs.io/job-name=gpu")[
                "items"
            ],
            "the GPU pod",
        )[0]
        container = pod["spec"]["containers"][0]
        assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in container["env"]
        assert {
            "name": "nvidia-libs",
            "hostPath": {"path": "/opt/nvidia/lib64", "type": ""},
        } in pod["spec"]["volumes"]
        assert operator.readyz()


def test_chart_identity_is_refused_what_the_operator_does_not_need(
    installed: Release, kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    identity = f"system:serviceaccount:{installed.namespace}:{installed.sa}"
    result = kube_cluster.kubectl(
        "get", "secrets", "-n", kube_namespace, f"--as={identity}", check=False
    )
    assert result.returncode != 0
    assert "Forbidden" in result.stderr and 'cannot list resource "secrets"' in result.stderr, (
        result.stderr
    )
    ns = kube_namespace
    allowed = [
        ("list", "pods"),
        ("watch", "services"),
        ("create", "pods"),
        ("delete", "services"),
        ("patch", "mxjobs.trainjobs.io/status"),
        ("delete", "tfjobs.trainjobs.io"),
        ("create", "deployments.apps"),
        ("create", "events"),
    ]
    refused = [
        ("get", "secrets"),
        ("list", "configmaps"),
        ("update", "pods"),
        ("patch", "pods"),
        ("create", "pods/exec"),
        ("get", "pods/log"),
        ("update", "mxjobs.trainjobs.io"),
        ("create", "mxjobs.trainjobs.io"),
        ("patch", "mxjobs.trainjobs.io"),
        ("delete", "deployments.apps"),
        ("update", "deployments.apps"),
        ("create", "roles.rbac.authorization.k8s.io"),
        ("create", "leases.coordination.k8s.io"),
        ("delete", "events"),
        ("create", "serviceaccounts/token"),
    ]
    for verb, resource in allowed:
        assert can_i(kube_cluster, identity, verb, resource, ns), (verb, resource)
    for verb, resource in refused:
        assert not can_i(kube_cluster, identity, verb, resource, ns), (verb, resource)
    assert not can_i(kube_cluster, identity, "list", "nodes", None)
    assert not can_i(kube_cluster, identity, "create", "customresourcedefinitions", None)


def test_upgrade_to_leader_election_and_one_namespace(
    helm: Helm, kube_cluster: ControlPlane, tmp_path: Path
) -> None:
    name, ns, jobs, other = unique("up"), unique("helm-up"), unique("team"), unique("other")
    full = f"{name}-trainjobs"
    sa = f"system:serviceaccount:{ns}:{full}"
    with (
        namespaces(kube_cluster, ns),
        namespaces(kube_cluster, jobs, other, restricted=False),
        explained(kube_cluster, ns, jobs),
    ):
        try:
            helm("install", name, str(CHART), f"--namespace={ns}", "--wait", "--timeout=120s")
            assert exists(kube_cluster, f"clusterrole/{full}")
            assert can_i(kube_cluster, sa, "list", "pods", None)
            helm(
                "upgrade",
                name,
                str(CHART),
                f"--namespace={ns}",
                "--wait",
                "--timeout=120s",
                *values_args(
                    helm.home, {"replicaCount": 2, "watchNamespaces": [jobs], "logFormat": "json"}
                ),
            )
            history = json.loads(helm("history", name, f"--namespace={ns}", "-o", "json").stdout)
            assert [h["revision"] for h in history] == [1, 2], history
            assert history[-1]["status"] == "deployed"

            deployment = get_json(kube_cluster, "deployment", full, "-n", ns)
            assert deployment["spec"]["replicas"] == 2
            args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            assert {
                "--leader-elect",
                f"--namespace={jobs}",
                "--log-format=json",
                f"--leader-election-namespace={ns}",
            } <= set(args)
            # The cluster-wide grant is gone; a Role in the watched namespace replaced it.
            assert not exists(kube_cluster, f"clusterrole/{full}")
            assert not exists(kube_cluster, f"clusterrolebinding/{full}")
            assert exists(kube_cluster, f"role/{full}", "-n", jobs)
            assert exists(kube_cluster, f"role/{full}-leader-election", "-n", ns)
            assert can_i(kube_cluster, sa, "list", "pods", jobs)
            assert not can_i(kube_cluster, sa, "list", "pods", other)
            assert not can_i(kube_cluster, sa, "list", "pods", None)

            with run_operator(kube_cluster, name, ns, full, tmp_path) as operator:

                def holder() -> str | None:
                    if not exists(kube_cluster, f"lease/{full}", "-n", ns):
                        return None
                    lease = get_json(kube_cluster, "lease", full, "-n", ns)
                    return str(lease["spec"].get("holderIdentity") or "") or None

                # leader.py's identity is HOSTNAME-PID: this very process leads.
                assert wait_for(holder, "the operator's Lease").endswith(f"-{operator.proc.pid}")
                apply(kube_cluster, jobs, mxjob("upgraded"))
                wait_succeeded(kube_cluster, jobs, "mxjob/upgraded")
                lines = [ln for ln in operator.log_text().splitlines() if ln.strip()]
                assert lines and all(json.loads(ln) for ln in lines), lines[:5]
            # SIGTERM released the Lease for a standby.
            assert not get_json(kube_cluster, "lease", full, "-n", ns)["spec"].get("holderIdentity")

            # And back to the defaults: Recreate again, cluster-wide again, no Lease Role.
            helm(
                "upgrade",
                name,
                str(CHART),
                f"--namespace={ns}",
                "--reset-values",
            )
            # Not --wait: Recreate waits for the old pods to be gone, which on KWOK depends on
            # its pod-delete stage; what matters here is that the API accepts the change.
            deployment = get_json(kube_cluster, "deployment", full, "-n", ns)
            assert deployment["spec"]["strategy"] == {"type": "Recreate"}
            assert deployment["spec"]["replicas"] == 1
            assert exists(kube_cluster, f"clusterrole/{full}")
            assert not exists(kube_cluster, f"role/{full}", "-n", jobs)
            assert not exists(kube_cluster, f"role/{full}-leader-election", "-n", ns)
        finally:
            helm("uninstall", name, f"--namespace={ns}", "--wait", "--timeout=60s", check=False)


RELEASE_KINDS = (
    "deployments,replicasets,pods,services,serviceaccounts,configmaps,roles,"
    "rolebindings,poddisruptionbudgets"
)


def test_uninstall_removes_everything(helm: Helm, kube_cluster: ControlPlane) -> None:
    name, ns, watched = unique("un"), unique("helm-un"), unique("helm-un-watched")
    with namespaces(kube_cluster, ns, watched), explained(kube_cluster, ns):
        values = {**NON_DEFAULT, "watchNamespaces": [watched], **KWOK_TEST_POD}
        helm(
            "install",
            name,
            str(CHART),
            f"--namespace={ns}",
            "--wait",
            "--timeout=120s",
            *values_args(helm.home, values),
        )
        selector = f"app.kubernetes.io/instance={name}"
        for where in (ns, watched):
            assert get_json(kube_cluster, RELEASE_KINDS, "-n", where, "-l", selector)["items"]
        helm("uninstall", name, f"--namespace={ns}", "--wait", "--timeout=120s")
        for where in (ns, watched):
            left = get_json(kube_cluster, RELEASE_KINDS, "-n", where, "-l", selector)["items"]
            assert not left, [f"{o['kind']}/{o['metadata']['name']}" for o in left]
        assert not get_json(
            kube_cluster,
            "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
            "validatingadmissionpolicybindings",
            "-l",
            selector,
        )["items"]
        assert not json.loads(helm("list", f"--namespace={ns}", "-o", "json").stdout)
        # Helm never deletes CRDs (that would delete every job): they stay.
        assert exists(kube_cluster, "crd/mxjobs.trainjobs.io")


# -- values the schema refuses ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": "two"}, "at '/replicaCount': got string, want integer"),
        ({"logFormat": "xml"}, "at '/logFormat': value must be one of 'text', 'json'"),
        ({"logLevel": "verbose"}, "at '/logLevel': value must be one of"),
        ({"replicas": 2}, "additional properties 'replicas' not allowed"),
        ({"image": {"tag": 1.0}}, "at '/image/tag': got number, want string"),
        ({"watchNamespaces": ["Team_A"]}, "at '/watchNamespaces/0'"),
        (
            {"admissionPolicy": {"extraOwners": [{"kinds": ["TFJob"]}]}},
            "at '/admissionPolicy/extraOwners/0': missing property 'group'",
        ),
        ({"concurrency": 0}, "at '/concurrency': minimum: got 0, want 1"),
        (
            {"controllerConfig": {"accelerator": {}}},
            "at '/controllerConfig': additional properties 'accelerator' not allowed",
        ),
        (
            {"leaderElection": {"renewDeadline": 30}},
            "leaderElection.renewDeadline (30) must be less than leaderElection.leaseDuration (15)",
        ),
        (
            {"podDisruptionBudget": {"enabled": True, "minAvailable": 1}},
            "set only one of minAvailable and maxUnavailable",
        ),
        ({"multiKueue": {"manager": True}}, "multiKueue.manager needs kueue.enabled=true"),
        ({"kueue": {"kubeflowIntegration": "maybe"}}, "at '/kueue/kubeflowIntegration'"),
        ({"kueue": {"configMap": "kueue-manager-config"}}, "at '/kueue/configMap'"),
    ],
    ids=[
        "replicas-string",
        "log-format",
        "log-level",
        "unknown-key",
        "tag-number",
        "namespace-name",
        "owner-without-group",
        "concurrency",
        "config-key",
        "lease-timing",
        "pdb-both",
        "manager-without-kueue",
        "kubeflow-integration",
        "kueue-config-map",
    ],
)
def test_invalid_values_are_refused_with_a_clear_message(
    values: dict[str, Any], message: str, helm_offline: Helm
) -> None:
    result = helm_offline(
        "template", "rel", str(CHART), *values_args(helm_offline.home, values), check=False
    )
    assert result.returncode != 0, result.stdout[:500]
    assert message in result.stderr, result.stderr


def test_install_with_invalid_values_creates_nothing(
    helm: Helm, kube_cluster: ControlPlane
) -> None:
    name, ns = unique("bad"), unique("helm-bad")
    with namespaces(kube_cluster, ns):
        result = helm(
            "install",
            name,
            str(CHART),
            f"--namespace={ns}",
            *values_args(helm.home, {"replicaCount": "two", "logFormat": "xml"}),
            check=False,
        )
        assert result.returncode != 0
        assert "values don't meet the specifications of the schema" in result.stderr
        assert "at '/replicaCount': got string, want integer" in result.stderr
        assert "at '/logFormat': value must be one of 'text', 'json'" in result.stderr
        assert not json.loads(helm("list", f"--namespace={ns}", "-o", "json").stdout)
        assert not get_json(
            kube_cluster,
            "deployments,serviceaccounts",
            "-n",
            ns,
            "-l",
            f"app.kubernetes.io/instance={name}",
        )["items"]


# -- the admission policy (on by default) ----------------------------------------------------
# charts/trainjobs/templates/admission-policy.yaml: with it the operator's ServiceAccount still
# runs every example of the repository, and is refused a pod in kube-system, a pod without an
# owner, a pod whose owner is not the job its label names, a Deployment that is not
# TensorBoard, and deleting a pod that is not a job's. Other identities are not affected.

EXAMPLES = sorted((REPO / "examples").glob("*/*.yaml"))
DENIED = "ValidatingAdmissionPolicy"


def test_default_render_binds_the_policy_to_the_operator_service_account(
    helm_offline: Helm,
) -> None:
    docs = helm_offline.template("rel", "ops")
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    [condition] = policy["spec"]["matchConditions"]
    assert "'system:serviceaccount:ops:rel-trainjobs'" in condition["expression"]
    assert '["kube-system"]' in policy["spec"]["validations"][0]["expression"]

    off = helm_offline.template("rel", "ops", {"admissionPolicy": {"enabled": False}})
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]
    extra = helm_offline.template("rel", "ops", {"admissionPolicy": {
        "extraOwners": [{"group": "kubeflow.org", "kinds": ["PyTorchJob"]}],
        "excludedNamespaces": ["kube-system", "kube-public"]}})
    spec = next(d for d in extra if d["kind"] == "ValidatingAdmissionPolicy")["spec"]
    owners = spec["validations"][2]["expression"]
    assert "r.apiVersion.startsWith('kubeflow.org/') && r.kind in [\"PyTorchJob\"]" in owners
    assert '["kube-system","kube-public"]' in spec["validations"][0]["expression"]


def on_kwok(example: dict[str, Any]) -> dict[str, Any]:
    """The example as the fake nodes run it: every pod ends with 0 after 1 s."""
    job = copy.deepcopy(example)
    for spec in job["spec"]["replicaSpecs"].values():
        if "template" not in spec:
            continue  # a template-less PS (the default PS server) serves until cleanup
        notes = spec["template"].setdefault("metadata", {}).setdefault("annotations", {})
        notes.update({EXIT_CODE_ANNOTATION: "0", RUN_DURATION_ANNOTATION: "1s"})
    return job


def test_the_operator_runs_every_example_under_the_policy(
    installed: Release, kube_cluster: ControlPlane, kube_namespace: str, tmp_path: Path
) -> None:
    release, release_ns, sa = installed.name, installed.namespace, installed.sa
    ns = kube_namespace
    jobs = [doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text())
            if doc and doc.get("apiVersion", "").startswith("trainjobs.io/")]
    assert {j["kind"] for j in jobs} == {"MxJob", "TfJob", "Caffe2Job"}, EXAMPLES
    with run_operator(kube_cluster, release, release_ns, sa, tmp_path) as operator:
        for job in jobs:
            kube_cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(on_kwok(job)))
        # What the examples need beyond replicas gets through too: the managed Redis pod
        # (caffe2 redis.yaml; gone again once its job ends) and the TensorBoard Deployment
        # (tensorflow ps.yaml).
        wait_for(lambda: get_json(kube_cluster, "pods", "-n", ns, "-l",
                                  "trainjobs.io/component=redis")["items"],
                 "the managed Redis pod", timeout=60)
        for job in jobs:
            wait_succeeded(kube_cluster, ns, f"{job['kind'].lower()}/{job['metadata']['name']}",
                           timeout=120)
        assert exists(kube_cluster, "deployment/tf-ps-tensorboard", "-n", ns)
        denied = [line for line in operator.log_text().splitlines() if DENIED in line]
        assert not denied, denied[:3]


def admin_pod(name: str, labels: dict[str, str] | None = None,
              owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "x", "image": "example.invalid/x:1"}]}}


def test_the_operator_identity_is_refused_outside_its_bounds(
    installed: Release, kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    identity = f"system:serviceaccount:{installed.namespace}:{installed.sa}"
    ns = kube_namespace
    job = {"apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob", "metadata": {"name": "own"},
           "spec": {"replicaSpecs": {
               "Scheduler": {"template": {"spec": {"containers": [
                   {"name": "mxnet", "image": "example.invalid/x:1"}]}}},
               "Server": {"template": {"spec": {"containers": [
                   {"name": "mxnet", "image": "example.invalid/x:1"}]}}},
               "Worker": {"template": {"spec": {"containers": [
                   {"name": "mxnet", "image": "example.invalid/x:1"}]}}}}}}
    created = json.loads(kube_cluster.kubectl(
        "create", "-n", ns, "-o", "json", "-f", "-", input=json.dumps(job)).stdout)
    owner = {"apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob", "name": "own",
             "uid": created["metadata"]["uid"], "controller": True}
    labels = {"trainjobs.io/job-name": "own"}

    def create_as(obj: dict[str, Any], namespace: str) -> tuple[int, str]:
        result = kube_cluster.kubectl("create", "-n", namespace, f"--as={identity}",
                                      "--dry-run=server", "-f", "-", input=json.dumps(obj),
                                      check=False)
        return result.returncode, result.stderr

    # What the operator does is allowed (server-side dry run: admission runs, nothing stays).
    code, err = create_as(admin_pod("own-worker-0", labels, owner), ns)
    assert code == 0, err
    refused = {
        "a pod in kube-system": (admin_pod("own-worker-0", labels, owner), "kube-system",
                                 "may not create pods in namespace kube-system"),
        "a pod without an owner": (admin_pod("stray", labels), ns,
                                   "controlled by the trainjobs job their label names"),
        "a pod without the job label": (admin_pod("bare", None, owner), ns,
                                        "labelled trainjobs.io/job-name"),
        "a pod owned by another job than its label's": (
            admin_pod("other-worker-0", {"trainjobs.io/job-name": "other"}, owner), ns,
            "controlled by the trainjobs job their label names (other)"),
        "a pod not named after its job": (admin_pod("miner", labels, owner), ns,
                                           "named after the job their label names (own-...)"),
        "a pod owned by another kind": (
            admin_pod("rs-pod", labels, {**owner, "apiVersion": "apps/v1",
                                         "kind": "ReplicaSet"}), ns,
            "controlled by the trainjobs job"),
        "a Service without an owner": (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "labels": labels},
             "spec": {"ports": [{"port": 80}]}}, ns, "controlled by the trainjobs job"),
        "a Deployment that is not TensorBoard": (
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "own-miner", "labels": labels, "ownerReferences": [owner]},
             "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                 "metadata": {"labels": {"a": "b"}},
                 "spec": {"containers": [{"name": "x", "image": "example.invalid/x:1"}]}}}},
            ns, "only Deployments of components tensorboard"),
    }
    for what, (obj, namespace, words) in refused.items():
        code, err = create_as(obj, namespace)
        assert code != 0 and DENIED in err and words in err, (what, err)
    # What the policy cannot see (its template says so): whether the owner exists. A pod
    # naming a job that does not exist, consistently, is admitted.
    ghost = {**owner, "name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}
    code, err = create_as(admin_pod("ghost-worker-0", {"trainjobs.io/job-name": "ghost"},
                                    ghost), ns)
    assert code == 0, err

    # Deleting: only what a job owns; the admin's own pod is refused to the operator.
    kube_cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(admin_pod("mine")))
    result = kube_cluster.kubectl("delete", "pod", "mine", "-n", ns, f"--as={identity}",
                                  "--dry-run=server", check=False)
    assert result.returncode != 0 and "may delete only pods labelled" in result.stderr, (
        result.stderr)
    # Other identities are not concerned: the admin creates an unowned pod in kube-system.
    result = kube_cluster.kubectl("create", "-n", "kube-system", "--dry-run=server", "-f", "-",
                                  input=json.dumps(admin_pod("admins")), check=False)
    assert result.returncode == 0, result.stderr
def test_kubeflow_compatibility_render(helm_offline: Helm) -> None:
    """kubeflow.enabled: the plugin's flag, the kubeflow.org CRDs (kept on uninstall, the
    same as `trainjobs crds` writes with the plugin enabled) and exactly the grants on them
    that trainjobs' own kinds get; off by default, nothing of it."""
    assert not [d for d in helm_offline.template("kf", "trainjobs-system")
                if "kubeflow" in json.dumps(d)]
    docs = helm_offline.template("kf", "trainjobs-system", {"kubeflow": {"enabled": True}})
    assert "--enable-plugins=kubeflow" in operator_container(docs)["args"]
    crds = {d["metadata"]["name"]: d for d in by_kind(docs, "CustomResourceDefinition")}
    assert sorted(crds) == ["mxjobs.kubeflow.org", "tfjobs.kubeflow.org"]
    for name, crd in crds.items():
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        generated = yaml.safe_load(
            (CHART / "kubeflow-crds" / f"kubeflow.org_{name.split('.')[0]}.yaml").read_text())
        assert crd["spec"] == generated["spec"]
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    assert "r.apiVersion.startsWith('kubeflow.org/') && r.kind in [\"TFJob\",\"MXJob\"]" in \
        json.dumps(policy["spec"]["validations"]).replace('\\"', '"')
    grants = rbac_grants(one(docs, "ClusterRole")["rules"])
    kubeflow = {g for g in grants if g[0] == "kubeflow.org"}
    assert kubeflow == (
        {("kubeflow.org", p, v, "") for p in ("tfjobs", "mxjobs")
         for v in ("list", "watch", "delete")}
        | {("kubeflow.org", f"{p}/status", "patch", "") for p in ("tfjobs", "mxjobs")}
        | {("kubeflow.org", f"{p}/finalizers", "update", "") for p in ("tfjobs", "mxjobs")})


def test_kueue_queue_name_policy_on_the_api_server(
        helm_offline: Helm, kube_cluster: ControlPlane, trainjobs_crds: list[str]) -> None:
    """The chart's queue-name policy, applied to the real API server: a job's
    kueue.x-k8s.io/queue-name label may change while it is Queued, not once it runs (a status
    written by hand stands for the operator's)."""
    docs = helm_offline.template(f"kq{uuid.uuid4().hex[:6]}", "ops", {"kueue": {"enabled": True}})
    policy = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
              and d["metadata"]["name"].endswith("-queue-name")]
    assert len(policy) == 2
    ns = f"kq-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", ns)
    kube_cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": policy}))
    manifest = {"apiVersion": "trainjobs.io/v1alpha1", "kind": "TfJob",
                "metadata": {"name": "q", "labels": {"kueue.x-k8s.io/queue-name": "a"}},
                "spec": {"replicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                    "containers": [{"name": "tensorflow", "image": "example.invalid/x"}]}}}}}}

    def state(value: str) -> None:
        kube_cluster.kubectl("-n", ns, "patch", "tfjob", "q", "--subresource=status",
                             "--type=merge", "-p", json.dumps({"status": {"state": value}}))

    def relabel(queue: str) -> subprocess.CompletedProcess[str]:
        return kube_cluster.kubectl("-n", ns, "label", "tfjob", "q", "--overwrite",
                                    f"kueue.x-k8s.io/queue-name={queue}", check=False)

    try:
        kube_cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(manifest))
        state("Running")
        # The policy takes effect once the API server has loaded it.
        tries = iter(range(1000))

        def refusal() -> subprocess.CompletedProcess[str] | None:
            # A new queue each try: one accepted before the policy loaded changes the label.
            result = relabel(f"q{next(tries)}")
            return result if result.returncode != 0 else None

        refused = wait_for(refusal, "the policy to refuse a queue change of a Running job",
                           timeout=30)
        assert "cannot change while the job is Running" in refused.stderr, refused.stderr
        state("Queued")
        assert relabel("b").returncode == 0, "a Queued job's queue may change"
        kube_cluster.kubectl("-n", ns, "label", "tfjob", "q", "team=x")  # other labels: free
    finally:
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for doc in policy:
            kube_cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"],
                                 "--ignore-not-found", check=False)


def test_operator_as_the_chart_service_account_is_admitted_through_kueue(
        helm: Helm, kube_cluster: ControlPlane, kueue: Kueue, kube_namespace: str,
        tmp_path: Path) -> None:
    """kueue.enabled grants enough: the operator, as the chart's ServiceAccount, finds Kueue,
    creates a queued job's Workload, is admitted, runs it, reports Finished and removes
    Kueue's finalizer; and with the admission policy on (the default) its pods are admitted."""
    name, flavor = unique("tjk"), unique("hk")
    with queue_and_release(helm, kube_cluster, kube_namespace, name, flavor) as ns:
        helm("install", name, str(CHART), f"--namespace={ns}", "--wait", "--timeout=120s",
             *values_args(helm.home, {"kueue": {"enabled": True}, **KWOK_TEST_POD}))
        sa = f"{name}-trainjobs"
        with run_operator(kube_cluster, name, ns, sa, tmp_path) as operator:
            job = job_manifest("TfJob", "queued", {"Worker": replica(
                "tensorflow", exit_code="0", resources={"requests": {"cpu": "1"}})})
            job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "queue"}
            apply(kube_cluster, kube_namespace, job)
            wait_succeeded(kube_cluster, kube_namespace, "tfjob/queued")
            uid = get_json(kube_cluster, "tfjob", "queued", "-n", kube_namespace)[
                "metadata"]["uid"]

            def finished() -> dict[str, Any] | None:
                owned = workloads_owned_by(kube_cluster, kube_namespace, uid)
                done = [w for w in owned if condition_true(w, "Finished")
                        and not w["metadata"].get("finalizers")]
                return done[0] if done else None

            wait_for(finished, "the Workload Finished and without Kueue's finalizer")
            (pod,) = get_json(kube_cluster, "pods", "-n", kube_namespace, "-l",
                              "trainjobs.io/job-name=queued")["items"]
            assert pod["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == flavor
            assert operator.readyz()
