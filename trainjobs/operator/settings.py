"""Everything `trainjobs operator` is told, as one frozen tree built once at start.

Flags and the controller config file are read here and nowhere else. The config file's
sections belong to the plugins: the core names none of their keys. It reads the file, lets
plugins set sections from their command-line options (`trainjobs_config_overrides`, e.g.
`--gang-scheduler`), and has every plugin check its own section (`trainjobs_check_config`),
so that a malformed one stops the operator before it connects, naming the key.
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainjobs.core.progress import ProgressEndpoint
from trainjobs.core.progress_pod import AUDIENCE, TOKEN_FILE
from trainjobs.errors import SpecInvalid, TrainjobsError
from trainjobs.kube.selector import SelectorError, parse_selector
from trainjobs.kueue.integrations import IntegrationMode, parse_config_map
from trainjobs.kueue.reconcile import KueueSettings
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.leader import LeaseSettings
from trainjobs.plugin.config import ControllerConfig
from trainjobs.plugin.manager import PluginManager
from trainjobs.yamlio import read_one

__all__ = ["HttpSettings", "OperatorSettings", "ProgressSettings", "build_settings",
           "controller_config", "progress_settings", "read_config_file"]


@dataclass(frozen=True)
class HttpSettings:
    """Where /healthz, /readyz and /metrics are served, and when /readyz gives up on the API."""

    host: str = "0.0.0.0"
    port: int = 8080
    ready_api_timeout: float = 10.0  # 0: never unready for the API server's silence


@dataclass(frozen=True)
class ProgressSettings:
    """The progress endpoint (--progress-*): where it listens, what replicas are told."""

    host: str
    port: int
    url: str
    interval: float = 5.0
    tls_cert: str | None = None
    tls_key: str | None = None
    ca_pem: str = ""  # the CA replicas verify the endpoint with, inline; "": system CAs

    @property
    def endpoint(self) -> ProgressEndpoint:
        """What every replica is told."""
        return ProgressEndpoint(self.url, self.interval, AUDIENCE, TOKEN_FILE, self.ca_pem)


@dataclass(frozen=True)
class OperatorSettings:
    controller: ControllerSettings
    http: HttpSettings
    lease: LeaseSettings | None  # None: no leader election
    kubeconfig: str | None = None
    request_timeout: float = 30.0
    gc_thaw_interval: float = 3600.0
    enable_plugins: tuple[str, ...] = ()
    progress: ProgressSettings | None = None  # None: no endpoint, no pod changes


def read_config_file(path: str | None) -> dict[str, object]:
    """`--controller-config-file` as a mapping of sections ({} without one)."""
    if not path:
        return {}
    try:
        data = read_one(Path(path)) or {}
    except SpecInvalid as exc:
        raise TrainjobsError(f"--controller-config-file {path}: "
                             f"{'; '.join(map(str, exc.errors))}") from None
    if not isinstance(data, dict):
        raise TrainjobsError(f"--controller-config-file {path}: expected a mapping")
    return {str(k): v for k, v in data.items()}


def controller_config(data: Mapping[str, object], plugins: PluginManager,
                      options: Mapping[str, object]) -> ControllerConfig:
    """The file's sections with the plugins' command-line overrides merged in (per field),
    checked by every plugin: a `PluginError` naming the key when one is malformed."""
    merged = dict(data)
    for key, fields in plugins.config_overrides(options).items():
        section = merged.get(key)
        merged[key] = {**(section if isinstance(section, Mapping) else {}), **fields}
    config = ControllerConfig(merged)
    plugins.check_config(config)
    return config


def build_settings(args: argparse.Namespace, plugins: PluginManager) -> OperatorSettings:
    """The settings tree from the parsed flags (options.py) and the config file they name."""
    config = controller_config(read_config_file(args.controller_config_file), plugins,
                               vars(args))
    host, _, port = args.http_address.rpartition(":")
    lease = LeaseSettings(args.leader_election_namespace, args.leader_election_id,
                          args.lease_duration, args.renew_deadline, args.retry_period)
    try:
        selector = parse_selector(args.managed_jobs_namespace_selector)
    except SelectorError as exc:
        raise TrainjobsError(f"--managed-jobs-namespace-selector: {exc}") from None
    kueue = KueueSettings(manage_jobs_without_queue_name=args.manage_jobs_without_queue_name,
                          managed_jobs_namespace_selector=selector,
                          kubeflow_integration=IntegrationMode(args.kueue_kubeflow_integration),
                          config_map=parse_config_map(args.kueue_config_map))
    progress = progress_settings(args)
    return OperatorSettings(
        controller=ControllerSettings(
            progress_endpoint=None if progress is None else progress.endpoint,
            namespaces=tuple(args.namespace), concurrency=args.concurrency,
            status_coalesce_seconds=args.status_coalesce,
            progress_status_interval=args.progress_status_interval,
            progress_status_writes_per_second=args.progress_status_writes_per_second,
            max_replicas_per_job=args.max_replicas_per_job, controller_config=config,
            multikueue_manager=args.multikueue_manager, kueue=kueue),
        http=HttpSettings(host or "0.0.0.0", int(port), args.ready_api_timeout),
        lease=lease if args.leader_elect else None,
        kubeconfig=args.kubeconfig, request_timeout=args.request_timeout,
        gc_thaw_interval=args.gc_thaw_interval, enable_plugins=tuple(args.enable_plugins),
        progress=progress)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def progress_settings(args: argparse.Namespace) -> ProgressSettings | None:
    """--progress-* as settings, or None when --progress-listen is absent; a
    `TrainjobsError` naming the flag when they do not fit together."""
    listen = getattr(args, "progress_listen", None)
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TrainjobsError(f"--progress-listen {listen}: expected HOST:PORT")
    if not args.progress_url:
        raise TrainjobsError("--progress-listen needs --progress-url (what replicas are told)")
    if bool(args.progress_tls_cert) != bool(args.progress_tls_key):
        raise TrainjobsError("--progress-tls-cert and --progress-tls-key go together")
    if not args.progress_tls_cert and host not in LOOPBACK:
        raise TrainjobsError(f"--progress-listen {listen}: plain HTTP is served only on "
                             f"127.0.0.1 (tests); give --progress-tls-cert and -key")
    if args.progress_tls_cert:
        try:  # read again at start; checked here so a bad file stops it before it connects
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                args.progress_tls_cert, args.progress_tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise TrainjobsError(f"--progress-tls-cert {args.progress_tls_cert} / "
                                 f"--progress-tls-key {args.progress_tls_key}: {exc}") from None
    if not args.progress_interval > 0:
        raise TrainjobsError("--progress-interval must be positive")
    for flag in ("progress_status_interval", "progress_status_writes_per_second"):
        if not getattr(args, flag) > 0:
            raise TrainjobsError(f"--{flag.replace('_', '-')} must be positive")
    ca = ""
    if args.progress_ca_file:
        try:
            ca = Path(args.progress_ca_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TrainjobsError(f"--progress-ca-file: {exc}") from None
        if "-----BEGIN CERTIFICATE-----" not in ca:
            raise TrainjobsError(f"--progress-ca-file {args.progress_ca_file}: no PEM "
                                 f"certificate in it")
    return ProgressSettings(host.strip("[]"), int(port), args.progress_url,
                            args.progress_interval, args.progress_tls_cert,
                            args.progress_tls_key, ca)
