"""The `trainjobs operator` flags. Kept apart from main.py so that building the CLI parser does
not import the Kubernetes client (every `trainjobs` command would pay for it)."""

from __future__ import annotations

import argparse

from trainjobs.api.models import DEFAULT_MAX_REPLICAS_PER_JOB, MAX_REPLICAS
from trainjobs.kueue.constants import DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR
from trainjobs.kueue.integrations import CONFIG_KEY, DEFAULT_CONFIG_MAP, IntegrationMode

__all__ = ["add_operator_arguments"]


def add_operator_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube)")
    p.add_argument("--namespace", action="append", default=[], metavar="NS",
                   help="watch only this namespace (repeatable; default: all namespaces)")
    p.add_argument("--enable-plugins", type=_names, default=(), metavar="NAME,...",
                   help="load these plugins that are off unless enabled: kubeflow (serves "
                        "kubeflow.org/v1 TFJob and MXJob; never beside Kubeflow's "
                        "training-operator). Also TRAINJOBS_ENABLE_PLUGINS")
    p.add_argument("--concurrency", type=int, default=16,
                   help="jobs reconciled in parallel (default 16)")
    p.add_argument("--controller-config-file", metavar="FILE",
                   help="YAML mapping of the plugins' sections, each checked at start by its "
                        "plugin: accelerators (volumes and env per extended resource), "
                        "gangScheduling (a PodGroup per job for a gang scheduler), tfImage "
                        "(the default TensorFlow PS server's image); docs/operator.md")
    # Read by the gang plugin (trainjobs_config_overrides), which checks the name at start.
    p.add_argument("--gang-scheduler", metavar="SCHEDULER",
                   help="give every job a PodGroup for this gang scheduler (one the gang "
                        "plugin knows, docs/scheduling.md; overrides the controller config's; "
                        "default: none)")
    p.add_argument("--manage-jobs-without-queue-name", action="store_true",
                   help="when Kueue is served, put jobs without the kueue.x-k8s.io/queue-name "
                        "label behind it too (Kueue's manageJobsWithoutQueueName): they wait, "
                        "with no pod, until they get a queue and are admitted; only in "
                        "namespaces --managed-jobs-namespace-selector matches")
    p.add_argument("--managed-jobs-namespace-selector", metavar="SELECTOR",
                   default=DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
                   help="label selector of the namespaces whose unlabelled jobs "
                        "--manage-jobs-without-queue-name manages (Kueue's "
                        "managedJobsNamespaceSelector; default and Kueue's: "
                        f"'{DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR}'; '' matches every "
                        "namespace)")
    p.add_argument("--kueue-kubeflow-integration", choices=[m.value for m in IntegrationMode],
                   default=IntegrationMode.AUTO.value,
                   help="who admits a labelled kind Kueue can integrate itself (Kubeflow's "
                        "TFJob, ...): kueue (its integrations.frameworks names it: the "
                        "operator makes no Workload), operator (it does not: the operator's "
                        "Workload), or auto (default: read Kueue's Configuration from "
                        "--kueue-config-map; when it cannot, such a job is held, with no pod, "
                        "and says what to set). docs/scheduling.md")
    p.add_argument("--kueue-config-map", default=DEFAULT_CONFIG_MAP, metavar="NAMESPACE/NAME",
                   help="with --kueue-kubeflow-integration=auto, the ConfigMap holding "
                        f"Kueue's Configuration (key {CONFIG_KEY}; default "
                        f"{DEFAULT_CONFIG_MAP}, as Kueue's manifests and chart name it)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--http-address", default="0.0.0.0:8080", metavar="HOST:PORT",
                   help="serve /healthz, /readyz and /metrics here (default 0.0.0.0:8080)")
    p.add_argument("--leader-elect", action="store_true",
                   help="elect a leader on a Lease (needed with more than one replica)")
    p.add_argument("--leader-election-namespace", default="default")
    p.add_argument("--leader-election-id", default="trainjobs-operator")
    p.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS")
    p.add_argument("--renew-deadline", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--retry-period", type=float, default=2.0, metavar="SECONDS")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="give up on an API request after this long and retry it (default 30; "
                        "LISTs get at least 120)")
    p.add_argument("--status-coalesce", type=float, default=1.0, metavar="SECONDS",
                   help="write count-only status changes at most this often per job")
    p.add_argument("--max-replicas-per-job", type=_replica_limit,
                   default=DEFAULT_MAX_REPLICAS_PER_JOB, metavar="N",
                   help=f"refuse (InvalidSpec) a job with more replicas in all (default "
                        f"{DEFAULT_MAX_REPLICAS_PER_JOB}; at most {MAX_REPLICAS}, the CRDs' "
                        "own limit)")
    p.add_argument("--ready-api-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="/readyz answers 503 once the API server has not answered for this "
                        "long (default 10; 0: never for that reason)")
    p.add_argument("--multikueue-manager", action="store_true",
                   help="this cluster is a Kueue MultiKueue manager: run no job here, only "
                        "create and finish the Workloads of jobs managed by "
                        "kueue.x-k8s.io/multikueue (a job of this operator's is left alone, "
                        "with one log line; docs/multikueue.md)")
    p.add_argument("--gc-thaw-interval", type=float, default=3600.0, metavar="SECONDS",
                   help="the garbage collector's full walks skip what survived the last one, "
                        "except one walk of everything per interval (default 3600; 0: "
                        "CPython's collector as it is)")
    _add_progress_arguments(p)


def _add_progress_arguments(p: argparse.ArgumentParser) -> None:
    """Issue 37.3: the replicas' progress reports (docs/progress.md). Off without
    --progress-listen: then no pod changes and no port opens."""
    p.add_argument("--progress-listen", metavar="HOST:PORT",
                   help="serve the replicas' progress reports here (POST /v1/progress) and "
                        "tell every replica where to send them; off when absent. Plain HTTP "
                        "only on 127.0.0.1, TLS (--progress-tls-cert/-key) otherwise")
    p.add_argument("--progress-url", metavar="URL",
                   help="the URL replicas are told (TRAINJOBS_PROGRESS_URL), e.g. "
                        "https://trainjobs-progress.NS.svc:8443/v1/progress; required with "
                        "--progress-listen")
    p.add_argument("--progress-tls-cert", metavar="FILE", help="the endpoint's certificate")
    p.add_argument("--progress-tls-key", metavar="FILE", help="its private key")
    p.add_argument("--progress-ca-file", metavar="FILE",
                   help="PEM of the CA replicas verify the endpoint with, given to them inline "
                        "(TRAINJOBS_PROGRESS_CA); default: the system's CAs")
    p.add_argument("--progress-interval", type=float, default=5.0, metavar="SECONDS",
                   help="the fewest seconds between two reports of one replica process "
                        "(TRAINJOBS_PROGRESS_INTERVAL; default 5)")
    p.add_argument("--progress-status-interval", type=float, default=30.0, metavar="SECONDS",
                   help="a change of a job's status.progress alone is written at most this "
                        "often per job (default 30)")
    p.add_argument("--progress-status-writes-per-second", type=float, default=20.0,
                   metavar="N", help="and only within this many such writes per second for "
                                     "all jobs together (default 20; a burst of one second's "
                                     "worth)")


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _replica_limit(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_REPLICAS} (the CRDs refuse more)")
    return value
