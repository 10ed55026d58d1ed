"""Kueue (sigs.k8s.io/kueue v0.19.2) as a process beside a test control plane
(``ClusterOptions(kueue=KueueOptions())``, ``python -m trainjobs.testing.cluster up --kueue``,
the pytest fixture ``kueue``).

Why a module of its own: Kueue is pinned, built and cached apart (``build-kueue.sh``) and
brings much of its own: CRDs, admission webhooks it cannot run without, CRD conversion
webhooks. A cluster operator installs it from manifests as a Deployment behind a Service; here
the same manifests of the same module version (``config/components``, copied beside the
binary by the build) are rewritten to reach a process on 127.0.0.1:

* the CRDs (``crd/bases``), with the conversion webhook ``crd/kustomization.yaml`` patches in
  (ClusterQueue, Cohort, LocalQueue, Workload, MultiKueueCluster: v1beta1 <-> v1beta2) pointed
  at ``https://127.0.0.1:PORT/convert``;
* the mutating and validating webhook configurations (``webhook/manifests.yaml``, names
  prefixed ``kueue-`` as ``config/default`` does, job webhooks limited to namespaces other than
  kube-system and kueue-system as ``webhook/kustomization.yaml`` does) pointed at
  ``https://127.0.0.1:PORT/<path>``. The webhooks of integrations *not* enabled are left out:
  Kueue serves a no-op there (``jobframework.setupControllers``), and the pod webhook would put
  every pod created in the session behind a call to Kueue;
* both with the control plane's CA as caBundle, which also signs Kueue's serving certificate
  (``webhook.certDir``): ``internalCertManagement`` is off, since it would write the CA into a
  Service-based configuration this harness does not have.

Kueue v0.19.2 with internal cert management off reads a metrics certificate from the fixed
path ``/etc/kueue/metrics/certs/tls.{crt,key}`` (cmd/kueue/main.go) and exits without it,
even with metrics off. The harness writes a self-signed pair there once (atomically, shared by
every run on the machine) when it can, and otherwise says what to create.

The Configuration (:func:`kueue_configuration`): leader election off, webhook, health probe
and (off by default) metrics on free 127.0.0.1 ports, the visibility server off (it would bind
0.0.0.0:8082), ``integrations.frameworks`` (``batch/job`` by default; Kueue sets up a
framework whose CRD is absent only once the API appears, polling with a back-off up to 2 min,
so install e.g. the Kubeflow CRDs before asking for ``kubeflow.org/tfjob``),
``integrations.externalFrameworks`` (kinds whose Workloads another controller creates, e.g.
``MxJob.v1.trainjobs.io``), ``waitForPodsReady`` (Kueue v0.19 turns it on by default with a
30 min timeout) and anything else through ``KueueOptions.extra`` (MultiKueue, fair sharing).
The same text is the ConfigMap ``kueue-system/kueue-manager-config`` (key
``controller_manager_config.yaml``), where a real install keeps it and from which the operator's
``--kueue-kubeflow-integration=auto`` reads which integrations Kueue enables.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainjobs.kube.errors import ApiError
from trainjobs.testing._binaries import cache_root, ensure_built
from trainjobs.testing._crds import apply_crds
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubeapi import health_ok
from trainjobs.testing._pki import make_serving_cert
from trainjobs.testing._process import free_ports

if TYPE_CHECKING:
    from trainjobs.testing._controlplane import ControlPlane

__all__ = ["KUEUE_VERSION", "Kueue", "KueueOptions", "WaitForPodsReady", "find_kueue",
           "kueue_configuration"]

KUEUE_VERSION = "v0.19.2"
SCRIPT_NAME = "build-kueue.sh"
COMPONENT = "kueue"
#: The namespace Kueue believes it runs in (its Configuration's ``namespace``): MultiKueue
#: reads its kubeconfig Secrets there.
KUEUE_NAMESPACE = "kueue-system"
#: The ConfigMap (and key) Kueue's config/default and Helm chart mount its Configuration from.
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
#: Fixed in Kueue v0.19.2's cmd/kueue/main.go when internalCertManagement is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
#: The webhook configurations' names, as Kueue's config/default (namePrefix ``kueue-``).
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
_KUEUE_GROUP = "kueue.x-k8s.io"
#: Integrations that enable "pod" implicitly (their ImplicitlyEnabledFrameworkNames).
_IMPLY_POD = frozenset({"deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"})
_CONVERSION_PATCH = re.compile(r"^- path: patches/webhook_in_(\w+)\.yaml\s*$", re.MULTILINE)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_VERSION_LOGGED = re.compile(r'"gitVersion":"([^"]+)"')


@dataclass(frozen=True)
class WaitForPodsReady:
    """Kueue's ``waitForPodsReady``: an admitted Workload whose pods are not all ready within
    ``timeout`` (a Go duration) is evicted and requeued."""

    timeout: str = "5m"
    recovery_timeout: str | None = None
    block_admission: bool = False
    #: "Eviction" (Kueue's default) or "Creation".
    requeuing_timestamp: str | None = None
    requeuing_backoff_base_seconds: int | None = None
    requeuing_backoff_max_seconds: int | None = None
    #: None: requeued without limit.
    requeuing_backoff_limit_count: int | None = None

    def to_config(self) -> dict[str, Any]:
        strategy = {k: v for k, v in {
            "timestamp": self.requeuing_timestamp,
            "backoffBaseSeconds": self.requeuing_backoff_base_seconds,
            "backoffMaxSeconds": self.requeuing_backoff_max_seconds,
            "backoffLimitCount": self.requeuing_backoff_limit_count,
        }.items() if v is not None}
        config: dict[str, Any] = {"timeout": self.timeout, "blockAdmission": self.block_admission}
        if self.recovery_timeout is not None:
            config["recoveryTimeout"] = self.recovery_timeout
        if strategy:
            config["requeuingStrategy"] = strategy
        return config


@dataclass(frozen=True)
class KueueOptions:
    """What Kueue's Configuration says; see the module docstring."""

    #: ``integrations.frameworks``, e.g. ``("batch/job", "kubeflow.org/tfjob")``.
    frameworks: tuple[str, ...] = ("batch/job",)
    #: ``integrations.externalFrameworks``: ``Kind.version.group`` of kinds whose Workloads
    #: another controller creates (Kueue then treats them as known owners).
    external_frameworks: tuple[str, ...] = ()
    #: None: Kueue's own default (on, 30 min timeout).
    wait_for_pods_ready: WaitForPodsReady | None = None
    manage_jobs_without_queue_name: bool = False
    #: VisibilityOnDemand is off: its API server would bind 0.0.0.0:8082.
    feature_gates: Mapping[str, bool] = field(
        default_factory=lambda: {"VisibilityOnDemand": False})
    #: Serve Prometheus metrics (HTTPS, authenticated) on a free 127.0.0.1 port.
    metrics: bool = False
    #: Merged last into the Configuration (e.g. ``{"multiKueue": {...}}``, ``fairSharing``).
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: ``--zap-log-level`` (1 info, 2 and more: Kueue's V(n) debug lines).
    log_level: int = 2
    start_timeout: float = 90.0


def find_kueue(*, build: bool = True) -> Path:
    """The directory (``bin/kueue``, ``config/components/``) of the pinned Kueue, built when
    missing and allowed (tens of minutes on a cold Go cache; progress on stderr)."""
    home = cache_root() / "kueue" / f"kueue-{KUEUE_VERSION}"

    def complete() -> bool:
        return (os.access(home / "bin" / "kueue", os.X_OK)
                and (home / "config" / "components" / "crd" / "bases").is_dir())

    return ensure_built(f"Kueue {KUEUE_VERSION}", home, complete, SCRIPT_NAME,
                        env={"KUEUE_VERSION": KUEUE_VERSION}, build=build)


def kueue_configuration(options: KueueOptions, *, webhook_port: int, health_port: int,
                        metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's ``config.kueue.x-k8s.io/v1beta2`` Configuration for ``options``."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}" if options.metrics else "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": options.manage_jobs_without_queue_name,
        "integrations": {"frameworks": list(options.frameworks),
                         "externalFrameworks": list(options.external_frameworks)},
        "featureGates": dict(options.feature_gates),
    }
    if options.wait_for_pods_ready is not None:
        config["waitForPodsReady"] = options.wait_for_pods_ready.to_config()
    return _merge(config, options.extra)


def webhook_configurations(manifests: str, frameworks: tuple[str, ...], base_url: str,
                           ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (its ``config/components/webhook/manifests.yaml``)
    pointed at ``base_url`` with ``ca_bundle``, named as ``config/default`` names them, the
    job webhooks limited to namespaces other than kube-system and Kueue's own, and only the
    webhooks of Kueue's own kinds and of the enabled ``frameworks`` kept."""
    enabled = set(frameworks)
    if enabled & _IMPLY_POD:
        enabled.add("pod")
    configs = [doc for doc in yaml.safe_load_all(manifests) if doc]
    for config in configs:
        config["metadata"]["name"] = WEBHOOK_CONFIGURATIONS[config["kind"]]
        kept = []
        for hook in config["webhooks"]:
            rule = hook["rules"][0]
            group, plural = rule["apiGroups"][0], rule["resources"][0]
            if group != _KUEUE_GROUP:
                singular = plural.removesuffix("s")
                framework = singular if group in ("", "apps") else f"{group}/{singular}"
                if framework not in enabled:
                    continue
                hook["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", KUEUE_NAMESPACE]}]}
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca_bundle}
            kept.append(hook)
        config["webhooks"] = kept
    return configs


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Kueue:
    """Kueue running as the control plane's component ``kueue`` (its log is
    ``logs/kueue.log``; a dead Kueue is reported by ``ControlPlane.dead()`` like any
    component). Start with :meth:`start`; :meth:`configure` restarts it with other options
    on the same ports; :meth:`stop` kills it and removes its webhook configurations."""

    def __init__(self, plane: ControlPlane, home: Path, options: KueueOptions) -> None:
        self.plane = plane
        self.home = home
        self.options = options
        self.workdir = plane.workdir / "kueue"
        self.webhook_port, self.health_port, self.metrics_port = free_ports(3)
        self.config_file = self.workdir / "config.yaml"
        self.log = plane.logs_dir / f"{COMPONENT}.log"
        self.timings: dict[str, float] = {}
        self._ca_bundle = base64.b64encode(plane.pki.ca_cert.read_bytes()).decode()
        self._running = False

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    @classmethod
    def start(cls, plane: ControlPlane, options: KueueOptions | None = None) -> Kueue:
        """Install Kueue's CRDs and webhook configurations, start it, and wait until its
        webhooks answer; on failure nothing of it keeps running and the error names its log."""
        options = options or KueueOptions()
        t0 = time.monotonic()
        kueue = cls(plane, find_kueue(), options)
        kueue.timings["binary"] = time.monotonic() - t0
        try:
            kueue._install(t0 + options.start_timeout)
            kueue.timings["installed"] = time.monotonic() - t0
            kueue._run(t0 + options.start_timeout)
        except BaseException:
            with contextlib.suppress(ControlPlaneError):
                kueue.stop()
            raise
        kueue.timings["ready"] = time.monotonic() - t0
        return kueue

    # -- install ----------------------------------------------------------------------------

    def _install(self, deadline: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        make_serving_cert(self.workdir / "certs", subject="/CN=kueue-webhook",
                          ca_cert=self.plane.pki.ca_cert, ca_key=self.plane.pki.ca_key)
        ensure_metrics_cert()
        self._apply([{"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": KUEUE_NAMESPACE}}], "namespace.yaml")
        crds = self.workdir / "crds"
        shutil.rmtree(crds, ignore_errors=True)
        crds.mkdir()
        components = self.home / "config" / "components"
        converted = set(_CONVERSION_PATCH.findall(
            (components / "crd" / "kustomization.yaml").read_text()))
        for source in sorted((components / "crd" / "bases").glob("*.yaml")):
            # 1.6 MB of CRDs: libyaml's loader and JSON out take 0.3 s where PyYAML's pure
            # Python loader and dumper take 4 s.
            crd = yaml.load(source.read_text(), Loader=_YAML_LOADER)
            if crd["spec"]["names"]["plural"] in converted:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": self._client_config("/convert"),
                    "conversionReviewVersions": ["v1"]}}
            (crds / f"{source.stem}.json").write_text(json.dumps(crd))
        # Established is what Kueue needs; their OpenAPI schemas (kubectl explain) follow.
        apply_crds(self.plane.kubeconfig, crds, kubectl=self.plane.bin_dir / "kubectl",
                   timeout=max(1.0, deadline - time.monotonic()), wait_published=False)
        self._apply_webhooks()

    def _client_config(self, path: str) -> dict[str, str]:
        return {"url": f"{self.webhook_url}{path}", "caBundle": self._ca_bundle}

    def _apply_webhooks(self) -> None:
        manifests = self.home / "config" / "components" / "webhook" / "manifests.yaml"
        self._apply(webhook_configurations(manifests.read_text(), self.options.frameworks,
                                           self.webhook_url, self._ca_bundle), "webhooks.yaml")

    def _apply(self, objects: list[dict[str, Any]], name: str) -> None:
        path = self.workdir / name
        path.write_text(yaml.safe_dump_all(objects))
        self.plane.kubectl("apply", "--server-side", "--force-conflicts",
                           "--field-manager=trainjobs-tests", "-f", str(path))

    # -- run --------------------------------------------------------------------------------

    def _run(self, deadline: float) -> None:
        config = kueue_configuration(
            self.options, webhook_port=self.webhook_port, health_port=self.health_port,
            metrics_port=self.metrics_port, cert_dir=self.workdir / "certs")
        self.config_file.write_text(yaml.safe_dump(config))
        # Where Kueue's Deployment mounts it from (what --kueue-kubeflow-integration=auto
        # reads), written before Kueue starts as a rollout would.
        self._apply([{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": CONFIG_MAP, "namespace": KUEUE_NAMESPACE},
                      "data": {CONFIG_KEY: self.config_file.read_text()}}], "configmap.yaml")
        offset = self.log.stat().st_size if self.log.exists() else 0
        self.plane.ports["kueue-webhook"] = self.webhook_port
        self.plane.ports["kueue-health"] = self.health_port
        self.plane.launch(COMPONENT, self.home / "bin" / "kueue", [
            f"--config={self.config_file}", f"--zap-log-level={self.options.log_level}"],
            {"KUBECONFIG": str(self.plane.kubeconfig)})
        self._running = True
        self.wait_ready(deadline)
        logged = _VERSION_LOGGED.search(self._log_since(offset))
        if logged is None or logged.group(1) != KUEUE_VERSION:
            raise ControlPlaneError(
                f"kueue in {self.home} logged gitVersion "
                f"{logged.group(1) if logged else 'nothing'}, not {KUEUE_VERSION}; log {self.log}")

    def wait_ready(self, deadline: float) -> None:
        """Wait until Kueue's /readyz answers (its webhook server started) and its webhooks
        answer through the API server; a Kueue that exits fails at once, with its log."""
        self.plane.wait_until(lambda: health_ok(self.health_port, "/readyz", tls=False),
                              "kueue /readyz (its webhook server started)", deadline)
        self.plane.wait_until(self.webhooks_answer, "kueue's webhooks to answer", deadline)

    def _log_since(self, offset: int) -> str:
        with self.log.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def webhooks_answer(self) -> bool:
        """A server-side dry-run create of a ResourceFlavor passes Kueue's mutating and
        validating webhooks: the API server reaches Kueue and trusts its certificate."""
        try:
            self.plane.api().call(
                "POST", f"/apis/{_KUEUE_GROUP}/v1beta2/resourceflavors?dryRun=All",
                {"apiVersion": f"{_KUEUE_GROUP}/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "trainjobs-harness-probe"}}, timeout=5.0)
        except ApiError:
            return False
        return True

    def configure(self, options: KueueOptions) -> None:
        """Restart Kueue with ``options`` (same ports and certificates; the webhook
        configurations follow the enabled integrations). Nothing happens when they are the
        options it runs with."""
        if options == self.options and self._running:
            return
        self.plane.kill(COMPONENT, signal.SIGTERM)
        self._running = False
        self.options = options
        deadline = time.monotonic() + options.start_timeout
        self._apply_webhooks()
        self._run(deadline)

    @contextlib.contextmanager
    def configured(self, options: KueueOptions) -> Iterator[Kueue]:
        """Kueue runs with ``options`` inside the block, and with its previous options again
        after it (a module whose tests need e.g. a short ``waitForPodsReady``)."""
        previous = self.options
        self.configure(options)
        try:
            yield self
        finally:
            self.configure(previous)

    def with_options(self, **changes: Any) -> KueueOptions:
        """The current options with ``changes`` (for :meth:`configured`)."""
        return replace(self.options, **changes)

    def stop(self) -> None:
        """Stop Kueue (SIGTERM, then SIGKILL) and delete its webhook configurations, so the
        API server stops calling it. Its CRDs and objects stay. Idempotent."""
        if COMPONENT in self.plane.pids:
            self.plane.kill(COMPONENT, signal.SIGTERM)
        self._running = False
        for kind, name in WEBHOOK_CONFIGURATIONS.items():
            self.plane.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


def ensure_metrics_cert(directory: Path = METRICS_CERT_DIR) -> None:
    """A parseable ``tls.crt``/``tls.key`` in ``directory`` (see the module docstring): made
    once, self-signed, renamed into place whole so that concurrent runs never see half."""
    if (directory / "tls.crt").is_file() and (directory / "tls.key").is_file():
        return
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".certs-", dir=directory.parent))
    except OSError as exc:
        raise ControlPlaneError(
            f"Kueue {KUEUE_VERSION} needs a metrics certificate at {directory}/tls.crt and "
            f"tls.key (a fixed path in its cmd/kueue/main.go), and this user cannot create it "
            f"({exc}); as root: mkdir -p {directory} && openssl req -x509 -newkey ec -pkeyopt "
            f"ec_paramgen_curve:prime256v1 -nodes -subj /CN=kueue-metrics -days 3650 "
            f"-keyout {directory}/tls.key -out {directory}/tls.crt") from exc
    try:
        make_serving_cert(tmp, subject="/CN=kueue-metrics")
        (tmp / "openssl.cnf").unlink()
        tmp.chmod(0o755)
        try:
            tmp.rename(directory)
        except OSError:
            if not (directory / "tls.crt").is_file():  # not a concurrent run's: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

