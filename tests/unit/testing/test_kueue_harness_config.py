"""The Kueue harness's pure parts: the Configuration it writes and how it points Kueue's
webhook manifests at a process on 127.0.0.1 (the manifest here has the shape of Kueue
v0.19.2's config/components/webhook/manifests.yaml)."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainjobs.testing import KueueOptions, WaitForPodsReady, kueue_configuration
from trainjobs.testing._kueue import webhook_configurations


def hook(name: str, group: str, resource: str, path: str) -> dict[str, object]:
    return {"admissionReviewVersions": ["v1"], "name": name, "failurePolicy": "Fail",
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": [resource]}]}


MANIFESTS = yaml.safe_dump_all([
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"},
     "webhooks": [hook("mjob.kb.io", "batch", "jobs", "/mutate-batch-v1-job"),
                  hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
                  hook("mtfjob.kb.io", "kubeflow.org", "tfjobs", "/mutate-kubeflow-org-v1-tfjob"),
                  hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads",
                       "/mutate-kueue-x-k8s-io-v1beta2-workload")]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"},
     "webhooks": [hook("vdeployment.kb.io", "apps", "deployments", "/validate-apps-v1-deployment"),
                  hook("vpod.kb.io", "", "pods", "/validate--v1-pod")]},
])


def names(configs: list[dict[str, object]]) -> list[list[str]]:
    return [[h["name"] for h in c["webhooks"]] for c in configs]  # type: ignore[attr-defined]


def test_only_kueues_own_and_the_enabled_integrations_webhooks_are_kept() -> None:
    configs = webhook_configurations(MANIFESTS, ("batch/job",), "https://127.0.0.1:9", "Q0E=")
    assert [c["metadata"]["name"] for c in configs] == [
        "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"]
    assert names(configs) == [["mjob.kb.io", "mworkload.kb.io"], []]
    job, workload = configs[0]["webhooks"]
    assert job["clientConfig"] == {"url": "https://127.0.0.1:9/mutate-batch-v1-job",
                                   "caBundle": "Q0E="}
    assert job["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system", "kueue-system"]
    assert "namespaceSelector" not in workload  # Kueue's own kinds: every namespace


def test_tfjob_and_pod_implied_by_deployment() -> None:
    configs = webhook_configurations(MANIFESTS, ("kubeflow.org/tfjob", "deployment"),
                                     "https://127.0.0.1:9", "Q0E=")
    assert names(configs) == [["mpod.kb.io", "mtfjob.kb.io", "mworkload.kb.io"],
                              ["vdeployment.kb.io", "vpod.kb.io"]]


def test_configuration() -> None:
    options = KueueOptions(
        frameworks=("batch/job", "kubeflow.org/tfjob"),
        external_frameworks=("MxJob.v1alpha1.trainjobs.io",),
        wait_for_pods_ready=WaitForPodsReady(timeout="10s", requeuing_backoff_base_seconds=1),
        extra={"webhook": {"port": 1}, "fairSharing": {"preemptionStrategies": []}})
    config = kueue_configuration(options, webhook_port=9443, health_port=8081,
                                 metrics_port=8443, cert_dir=Path("/certs"))
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["metrics"] == {"bindAddress": "0"}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:8081"}
    # extra is merged last, key by key
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/certs"}
    assert config["fairSharing"] == {"preemptionStrategies": []}
    assert config["integrations"] == {
        "frameworks": ["batch/job", "kubeflow.org/tfjob"],
        "externalFrameworks": ["MxJob.v1alpha1.trainjobs.io"]}
    assert config["waitForPodsReady"] == {"timeout": "10s", "blockAdmission": False,
                                          "requeuingStrategy": {"backoffBaseSeconds": 1}}
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    assert "waitForPodsReady" not in kueue_configuration(
        KueueOptions(), webhook_port=1, health_port=2, metrics_port=3, cert_dir=Path("/c"))


def test_metrics_cert_made_once(tmp_path: Path) -> None:
    from trainjobs.testing._kueue import ensure_metrics_cert

    certs = tmp_path / "kueue" / "metrics" / "certs"
    ensure_metrics_cert(certs)
    made = {f.name: f.read_bytes() for f in certs.iterdir()}
    assert set(made) == {"tls.crt", "tls.key"}
    assert made["tls.crt"].startswith(b"-----BEGIN CERTIFICATE-----")
    ensure_metrics_cert(certs)  # a second run keeps the pair
    assert {f.name: f.read_bytes() for f in certs.iterdir()} == made
    assert [p.name for p in certs.parent.iterdir()] == ["certs"]  # no temp dir left
