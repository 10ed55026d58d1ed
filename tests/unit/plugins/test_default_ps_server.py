"""The default TensorFlow PS server, as the original TfJob had it: `PS: {replicas: 2}` with no
template at all (the tf-operator README's example) is a complete replica spec, and the
server's image is settable per job (`spec.tfImage`) and per operator (controller config
`tfImage`), as the original operator's `tfImage`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainjobs_features.tf_ps_server import PS_SERVER_IMAGE

from tests.unit.helpers import (
    PLUGINS,
    Doc,
    container,
    env_values,
    errors_of,
    job_doc,
    named,
    plugin_env,
    render,
    replica,
    template,
)
from trainjobs.cli import main
from trainjobs.plugin.manager import DISABLE_AUTOLOAD_ENV, DISABLE_PLUGINS_ENV, load_plugins

# The tf-operator README's job, in trainjobs' form.
SEED: Doc = job_doc("TfJob", "example-job", {
    "Master": replica(1, template(container("tensorflow")), restartPolicy="OnFailure"),
    "Worker": replica(1, template(container("tensorflow")), restartPolicy="OnFailure"),
    "PS": {"replicas": 2},
})


def _ps_containers(doc: Doc, **kw: object) -> list[dict[str, object]]:
    rendered = render(doc, **kw)  # type: ignore[arg-type]
    return [named(rendered.pods[f"example-job-ps-{i}"]["spec"]["containers"], "tensorflow")
            for i in (0, 1)]


def test_ps_without_template_gets_the_default_server_with_tf_config() -> None:
    for i, server in enumerate(_ps_containers(SEED)):
        assert server["image"] == PS_SERVER_IMAGE
        assert server["command"][:3] == ["python", "-u", "-c"]  # type: ignore[index]
        tf_config = env_values(server)["TF_CONFIG"]  # type: ignore[arg-type]
        assert f'"task":{{"type":"ps","index":{i}}}' in tf_config


def test_the_image_per_job_wins_over_the_controller_config() -> None:
    config = {"tfImage": "registry.example/tensorflow:2.20.0"}
    assert {c["image"] for c in _ps_containers(SEED, controller_config=config)} == {
        "registry.example/tensorflow:2.20.0"}
    own = {**SEED, "spec": {**SEED["spec"], "tfImage": "mine/tf:1"}}
    assert {c["image"] for c in _ps_containers(own, controller_config=config)} == {"mine/tf:1"}


def test_other_replica_types_still_need_a_template() -> None:
    doc = job_doc("TfJob", "tf", {"Worker": {"replicas": 2}})
    assert errors_of(doc) == {"spec.replicaSpecs.Worker.template": "required field is missing"}


def test_without_the_ps_server_plugin_a_templateless_ps_is_refused() -> None:
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1", DISABLE_PLUGINS_ENV: "tf_ps_server"}):
        plugins = load_plugins()
    assert "tf_ps_server" not in {p.name for p in plugins.plugins}
    message = errors_of(SEED, plugins)["spec.replicaSpecs.PS.template"]
    assert "no installed plugin supplies a 'tensorflow' container" in message


def test_the_seed_job_renders_from_the_cli(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(SEED, sort_keys=False))
    assert main(["render", str(path)]) == 0
    pods = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == [
        "example-job-master-0", "example-job-worker-0", "example-job-ps-0", "example-job-ps-1"]


@pytest.mark.parametrize("value", ["", 3, ["a"]])
def test_a_malformed_tfimage_in_the_controller_config_stops_the_operator(
        tmp_path: Path, value: object) -> None:
    from trainjobs.errors import TrainjobsError
    from trainjobs.operator.settings import controller_config, read_config_file

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"tfImage": value}))
    with pytest.raises(TrainjobsError, match="tfImage: expected an image name"):
        controller_config(read_config_file(str(path)), PLUGINS, {})
    path.write_text(yaml.safe_dump({"tfImage": "mirror/tf:2"}))
    assert controller_config(read_config_file(str(path)), PLUGINS, {}) == {
        "tfImage": "mirror/tf:2"}
