"""`trainjobs operator`'s settings tree (trainjobs/operator/settings.py): built once at start
from the flags and the controller config file; plugins set and check their own sections (the
core names none of their keys) and each section is parsed once, not on every pod render."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainjobs_features import accelerators, gang, tf_ps_server
from trainjobs_features.gang import GangConfig, gang_config

from tests.unit.helpers import PLUGINS, render, tfjob
from trainjobs.errors import PluginError, TrainjobsError
from trainjobs.kueue.integrations import IntegrationMode
from trainjobs.operator.leader import LeaseSettings
from trainjobs.operator.options import add_operator_arguments
from trainjobs.operator.settings import (
    HttpSettings,
    OperatorSettings,
    build_settings,
    controller_config,
)
from trainjobs.plugin import ControllerConfig, config_section
from trainjobs.testing._pki import make_serving_cert

OPERATOR = Path(__file__).resolve().parents[3] / "trainjobs" / "operator"


def settings(*flags: str, config: dict[str, Any] | None = None,
             tmp_path: Path | None = None) -> OperatorSettings:
    parser = argparse.ArgumentParser()
    add_operator_arguments(parser)
    if config is not None:
        assert tmp_path is not None
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        flags = ("--controller-config-file", str(path), *flags)
    return build_settings(parser.parse_args(flags), PLUGINS)


def test_flags_build_the_tree() -> None:
    got = settings("--namespace", "a", "--namespace", "b", "--http-address", "127.0.0.1:9090",
                   "--concurrency", "4", "--request-timeout", "7", "--ready-api-timeout", "0",
                   "--leader-elect", "--lease-duration", "9", "--kubeconfig", "/k")
    assert got.controller.namespaces == ("a", "b")
    assert got.controller.concurrency == 4
    assert got.http == HttpSettings("127.0.0.1", 9090, 0.0)
    assert got.lease == LeaseSettings("default", "trainjobs-operator", 9.0, 10.0, 2.0)
    assert (got.kubeconfig, got.request_timeout) == ("/k", 7.0)
    assert got.controller.controller_config == {}
    assert settings().lease is None
    assert settings().http == HttpSettings("0.0.0.0", 8080, 10.0)


def test_the_gang_flag_wins_over_the_file_field_by_field(tmp_path: Path) -> None:
    file = {"gangScheduling": {"scheduler": "coscheduling", "scheduleTimeoutSeconds": 30},
            "tfImage": "mirror/tf:2"}
    from_file = settings(config=file, tmp_path=tmp_path).controller.controller_config
    assert gang_config(from_file) == GangConfig("coscheduling", "scheduler-plugins-scheduler", 30)
    flagged = settings("--gang-scheduler", "volcano", config=file,
                       tmp_path=tmp_path).controller.controller_config
    assert gang_config(flagged) == GangConfig("volcano", "volcano", 30)
    assert flagged["tfImage"] == "mirror/tf:2"
    assert gang_config(settings("--gang-scheduler", "coscheduling").controller
                       .controller_config).scheduler == "coscheduling"


@pytest.mark.parametrize(("flags", "config", "error", "message"), [
    (("--gang-scheduler", "kube-batch"), None, PluginError,
     "--gang-scheduler: 'kube-batch' is not one of none, coscheduling, volcano"),
    ((), {"gangScheduling": {"scheduler": "yunikorn"}}, PluginError,
     "gangScheduling.scheduler: 'yunikorn' is not one of"),
    ((), {"gangScheduling": "volcano"}, PluginError, "gangScheduling: expected a mapping"),
    ((), {"tfImage": 3}, PluginError, "tfImage: expected an image name, got 3"),
    ((), {"accelerators": ["nvidia.com/gpu"]}, PluginError,
     "accelerators: expected a mapping of extended resources"),
    ((), {"accelerators": {"nvidia.com/gpu": {"volumes": [{"name": "libs"}]}}}, PluginError,
     "accelerators.nvidia.com/gpu.volumes[0].mountPath: expected a non-empty string"),
    ((), {"accelerators": {"nvidia.com/gpu": {"envVars": [{"name": "X"}]}}}, PluginError,
     "accelerators.nvidia.com/gpu.envVars[0].value: missing"),
    ((), ["not", "a", "mapping"], TrainjobsError, "expected a mapping"),
])
def test_a_bad_value_stops_the_start_naming_it(tmp_path: Path, flags: tuple[str, ...],
                                               config: Any, error: type[Exception],
                                               message: str) -> None:
    with pytest.raises(error) as raised:
        settings(*flags, config=config, tmp_path=tmp_path)
    assert message in str(raised.value)


def test_a_missing_file_names_the_flag_and_path(tmp_path: Path) -> None:
    with pytest.raises(TrainjobsError, match=r"--controller-config-file .*nothere\.yaml"):
        settings("--controller-config-file", str(tmp_path / "nothere.yaml"))


def test_each_plugin_section_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, int] = {"gang": 0, "tf": 0, "gpu": 0}

    def counting(name: str, parse: Any) -> Any:
        def wrapped(section: object) -> Any:
            # Only the sections written here: `render` also validates the job, rendering with
            # no config (a plain {}), where every plugin sees its default.
            calls[name] += section is not None
            return parse(section)
        return wrapped

    monkeypatch.setattr(gang, "parse_gang_section",
                        counting("gang", gang.parse_gang_section))
    monkeypatch.setattr(tf_ps_server, "parse_tf_image",
                        counting("tf", tf_ps_server.parse_tf_image))
    monkeypatch.setattr(accelerators, "parse_accelerators",
                        counting("gpu", accelerators.parse_accelerators))
    gpu = {"nvidia.com/gpu": {"envVars": [{"name": "GPU_LIBS", "value": "/opt/gpu"}]}}
    config = controller_config({"gangScheduling": {"scheduler": "volcano"},
                                "tfImage": "mirror/tf:2", "accelerators": gpu}, PLUGINS, {})
    assert calls == {"gang": 1, "tf": 1, "gpu": 1}  # checked at start
    job = tfjob(Chief=1, Worker=4, PS=2)
    job["spec"]["replicaSpecs"]["PS"] = {"replicas": 2}  # the default PS server's image
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": 1}}
    for _ in range(3):
        rendered = render(job, controller_config=config)
        assert {p["spec"]["schedulerName"] for p in rendered.pods.values()} == {"volcano"}
        ps = [c["image"] for n, p in rendered.pods.items() if "-ps-" in n
              for c in p["spec"]["containers"]]
        assert ps == ["mirror/tf:2", "mirror/tf:2"]
        worker = rendered.pods["tf-worker-0"]["spec"]["containers"][0]
        assert {"name": "GPU_LIBS", "value": "/opt/gpu"} in worker["env"]
    assert calls == {"gang": 1, "tf": 1, "gpu": 1}  # 3 renderings of 7 pods: no parse again


def test_the_config_is_read_only_and_a_bad_section_raises_every_time() -> None:
    config = ControllerConfig({"k": 1})
    with pytest.raises(TypeError):
        config["k"] = 2  # type: ignore[index]
    seen: list[object] = []

    def parse(section: object) -> int:
        seen.append(section)
        raise PluginError("bad")

    for _ in range(2):
        with pytest.raises(PluginError):
            config_section(config, "k", parse)
    assert seen == [1, 1]
    assert config_section({"k": 5}, "k", lambda v: v) == 5  # a plain mapping: no cache


def test_the_core_names_no_plugin_key() -> None:
    for path in OPERATOR.glob("*.py"):
        text = path.read_text()
        for key in (gang.CONFIG_KEY, tf_ps_server.CONFIG_KEY, "accelerators"):
            assert f'"{key}"' not in text, f"{path.name} names the plugin key {key!r}"


def test_kueue_manage_jobs_without_queue_name_and_its_namespace_selector() -> None:
    off = settings().controller.kueue
    assert not off.manage_jobs_without_queue_name
    # Kueue's default selector: every namespace but kube-system and kueue-system.
    assert off.managed_jobs_namespace_selector.matches({"kubernetes.io/metadata.name": "ml"})
    assert not off.managed_jobs_namespace_selector.matches(
        {"kubernetes.io/metadata.name": "kube-system"})
    on = settings("--manage-jobs-without-queue-name",
                  "--managed-jobs-namespace-selector", "team in (ml, research)").controller.kueue
    assert on.manage_jobs_without_queue_name
    assert on.managed_jobs_namespace_selector.matches({"team": "ml"})
    assert not on.managed_jobs_namespace_selector.matches({"team": "web"})
    with pytest.raises(TrainjobsError, match=r"--managed-jobs-namespace-selector: .*cannot parse"):
        settings("--managed-jobs-namespace-selector", "team in ml")


def test_kueue_kubeflow_integration_defaults_to_auto_reading_kueues_configmap() -> None:
    default = settings().controller.kueue
    assert default.kubeflow_integration is IntegrationMode.AUTO
    assert default.config_map == ("kueue-system", "kueue-manager-config")
    got = settings("--kueue-kubeflow-integration", "operator",
                   "--kueue-config-map", "queueing/kueue-config").controller.kueue
    assert got.kubeflow_integration is IntegrationMode.OPERATOR
    assert got.config_map == ("queueing", "kueue-config")
    with pytest.raises(TrainjobsError, match=r"^--kueue-config-map 'kueue-config': expected "
                       "NAMESPACE/NAME"):
        settings("--kueue-config-map", "kueue-config")
    with pytest.raises(SystemExit):  # argparse's own one-line usage error
        settings("--kueue-kubeflow-integration", "maybe")


def test_progress_is_off_unless_listened_for_and_its_flags_are_checked(tmp_path: Path) -> None:
    assert settings().progress is None and settings().controller.progress_endpoint is None
    url = ("--progress-url", "https://trainjobs-progress.ops.svc:8443/v1/progress")
    for flags, words in [
        (("--progress-listen", "127.0.0.1:8443"), "needs --progress-url"),
        (("--progress-listen", "0.0.0.0:8443", *url), "plain HTTP is served only on"),
        (("--progress-listen", "nonsense", *url), "expected HOST:PORT"),
        (("--progress-listen", "0.0.0.0:8443", *url, "--progress-tls-cert", "c"),
         "go together"),
        (("--progress-listen", "127.0.0.1:1", *url, "--progress-ca-file",
          str(tmp_path / "missing")), "--progress-ca-file"),
    ]:
        with pytest.raises(TrainjobsError, match=words):
            settings(*flags)
    cert = make_serving_cert(tmp_path / "tls", subject="/CN=trainjobs-progress")
    tls = ("--progress-tls-cert", str(cert.cert), "--progress-tls-key", str(cert.key))
    with pytest.raises(TrainjobsError, match=r"--progress-tls-cert .* / --progress-tls-key"):
        settings("--progress-listen", "0.0.0.0:8443", *url, "--progress-tls-cert",
                 str(cert.cert), "--progress-tls-key", str(tmp_path / "missing"))
    ca = cert.ca_cert
    got = settings("--progress-listen", "0.0.0.0:8443", *url, *tls, "--progress-ca-file",
                   str(ca), "--progress-interval", "10")
    assert got.progress is not None and (got.progress.host, got.progress.port) == \
        ("0.0.0.0", 8443)
    endpoint = got.controller.progress_endpoint
    assert endpoint is not None and endpoint.url == url[1] and endpoint.interval == 10.0
    assert endpoint.audience == "trainjobs.io/progress" and endpoint.ca == ca.read_text()
    assert endpoint.token_file == "/var/run/secrets/trainjobs.io/progress/token"
