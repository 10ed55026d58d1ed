"""The real `trainjobs` command, run as a subprocess (`python -m trainjobs.cli`, so it works in
any environment where trainjobs is installed).

Every user mistake gives exit code 2, a short message on stderr naming the problem, and no
traceback. The invocations are independent, so they all start at once (module fixture) and
each test reads its result: the command's start-up time is paid in parallel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from trainjobs.cli import main

from .helpers import EXAMPLES, Doc, container, mxjob, replica, template, tfjob


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def _dump(doc: object) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def _with(doc: Doc, mutate: Callable[[Doc], object]) -> str:
    mutate(doc)
    return _dump(doc)


def _env_in_worker(name: str) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        worker = doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["env"] = [{"name": "A", "value": "1"}, {"name": name, "value": "mine"}]
    return mutate


# The mistakes of the issue, each run through the real command in its own process.
BAD_INPUTS: dict[str, tuple[str, list[str]]] = {
    # id: (file content, words stderr must contain)
    "invalid-yaml": ("apiVersion: trainjobs.io/v1alpha1\nkind: MxJob\nspec: [unclosed\n",
                     ["invalid YAML", "line 4"]),
    "unknown-kind": (_dump({**mxjob(), "kind": "PyTorchJob"}),
                     ["kind: unknown kind 'PyTorchJob'", "MxJob", "TfJob", "Caffe2Job"]),
    "missing-scheduler": (_with(mxjob(), lambda d: d["spec"]["replicaSpecs"].pop("Scheduler")),
                          ["spec.replicaSpecs.Scheduler", "needs at least 1 Scheduler"]),
    "negative-replicas": (
        _with(mxjob(), lambda d: d["spec"]["replicaSpecs"]["Worker"].update(replicas=-2)),
        ["spec.replicaSpecs.Worker.replicas", "must be at least 0, got -2"]),
    "name-too-long": (_with(mxjob(), lambda d: d["metadata"].update(name="n" * 56)),
                      ["metadata.name", "too long", "63"]),
    "dmlc-role-collision": (_with(mxjob(), _env_in_worker("DMLC_ROLE")),
                            ["spec.replicaSpecs.Worker.template.spec.containers[0].env",
                             "DMLC_ROLE is set by trainjobs"]),
    "tf-config-collision": (_with(tfjob(Chief=1, Worker=2), _env_in_worker("TF_CONFIG")),
                            ["spec.replicaSpecs.Worker.template.spec.containers[0].env",
                             "TF_CONFIG is set by trainjobs"]),
    "pod-template-typo": (
        _with(mxjob(), lambda d: d["spec"]["replicaSpecs"]["Server"]["template"]["spec"][
            "containers"][0].update(imagePullPolicyy="Always")),
        ["spec.replicaSpecs.Server.template.spec.containers[0].imagePullPolicyy",
         "unknown field"]),
}

# More mistakes, through `trainjobs.cli.main` in this process (the same code, no start-up).
MORE_BAD_INPUTS: dict[str, tuple[str | None, list[str]]] = {
    "empty-file": ("# nothing here\n", ["no job found"]),
    "missing-file": (None, ["cannot read file", "No such file"]),
    "not-a-mapping": ("- just\n- a list\n", ["a job must be a mapping"]),
    "second-document-bad": (
        _dump(mxjob("first")) + "---\n" + _dump({**tfjob("second", Worker=2),
                                                  "apiVersion": "v1"}),
        ["apiVersion: must be trainjobs.io/v1alpha1"]),
    "many-problems": (_with(mxjob(), lambda d: d["spec"]["replicaSpecs"].update(
        Server=replica(1, template(container("mxnet", ports=[{"containerPort": "x"}]))),
        Worker=replica(1, template(container("mxnet", tty="yes"))))),
        ["(2 problems)", "containers[0].ports[0].containerPort", "containers[0].tty"]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    tmp = tmp_path_factory.mktemp("cli")
    invocations: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {}
    base_env = {k: v for k, v in os.environ.items()
                if k not in ("TRAINJOBS_DISABLE_PLUGINS", "PYTHONHASHSEED")}
    base_env["TRAINJOBS_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only what trainjobs ships
    for name, (content, _) in BAD_INPUTS.items():
        path = tmp / f"{name}.yaml"
        path.write_text(content)
        invocations[f"bad:{name}"] = (("render", str(path)), base_env)
    all_examples = tmp / "all-examples.yaml"
    all_examples.write_text("---\n".join(p.read_text() for p in EXAMPLES))
    for seed in ("1", "2"):  # different hash seeds: no set or dict-order accident survives
        invocations[f"render-all:{seed}"] = (("render", str(all_examples)),
                                             {**base_env, "PYTHONHASHSEED": seed})
    invocations["plugins"] = (("plugins",), base_env)
    invocations["crds"] = (("crds", "-o", str(tmp / "crds-out")), base_env)

    def call(item: tuple[str, tuple[tuple[str, ...], dict[str, str]]]) -> tuple[str, Run]:
        key, (args, env) = item
        done = subprocess.run([sys.executable, "-m", "trainjobs.cli", *args], cwd=tmp,
                              capture_output=True, text=True, env=env, timeout=120, check=False)
        return key, Run(args, done.returncode, done.stdout, done.stderr)

    with ThreadPoolExecutor(max_workers=max(os.cpu_count() or 2, 2)) as pool:
        results = dict(pool.map(call, invocations.items()))
    results["crds-dir"] = Run((str(tmp / "crds-out"),), 0, "", "")
    yield results


def _check_refusal(code: int, stdout: str, stderr: str, source: str, words: list[str]) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr + stdout
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {source}: invalid job"), lines[0]
    assert len(lines) <= 6, stderr
    for word in words:
        assert word in stderr, f"{word!r} not in:\n{stderr}"


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exit_2_short_message_no_traceback(runs: dict[str, Run], case: str) -> None:
    run = runs[f"bad:{case}"]
    _check_refusal(run.returncode, run.stdout, run.stderr, run.args[-1], BAD_INPUTS[case][1])


@pytest.mark.parametrize("case", list(MORE_BAD_INPUTS))
def test_more_bad_inputs_in_process(case: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    content, words = MORE_BAD_INPUTS[case]
    path = tmp_path / f"{case}.yaml"
    if content is not None:
        path.write_text(content)
    code = main(["render", str(path)])
    out, err = capsys.readouterr()
    _check_refusal(code, out, err, str(path), words)


def test_usage_error_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["render"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage: trainjobs render" in err and "Traceback" not in err


def test_render_all_examples_and_deterministic_across_processes(runs: dict[str, Run]) -> None:
    one, two = runs["render-all:1"], runs["render-all:2"]
    assert one.returncode == 0, one.stderr
    assert one.stderr == ""
    assert one.stdout == two.stdout, "render output depends on PYTHONHASHSEED"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_render_each_example(runs: dict[str, Run], example: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(example)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    docs = list(yaml.safe_load_all(out))
    job = yaml.safe_load(example.read_text())
    name = job["metadata"]["name"]
    expected = [f"{name}-{key.lower()}-{i}"
                for key, spec in job["spec"]["replicaSpecs"].items()
                for i in range(spec.get("replicas", 1))]
    pods = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"
            and "trainjobs.io/replica-type" in d["metadata"]["labels"]]
    services = [d["metadata"]["name"] for d in docs if d["kind"] == "Service"
                and d["spec"].get("clusterIP") == "None"]
    assert pods == expected and services == expected
    # The subprocess rendering every example at once printed exactly these objects.
    everything = list(yaml.safe_load_all(runs["render-all:1"].stdout))
    mine = [d for d in everything if d["metadata"]["labels"]["trainjobs.io/job-name"] == name]
    assert mine == docs


def test_plugins_lists_frameworks_and_their_package(runs: dict[str, Run]) -> None:
    run = runs["plugins"]
    assert run.returncode == 0, run.stderr
    header, *rows = run.stdout.splitlines()
    assert header.split() == ["PLUGIN", "PACKAGE", "VERSION", "KINDS", "MODULE"]
    table = {r.split()[0]: r.split() for r in rows}
    for name, kind in (("mxnet", "MxJob"), ("tensorflow", "TfJob"), ("caffe2", "Caffe2Job")):
        assert table[name][1] == "trainjobs"
        assert table[name][3] == kind
        assert table[name][4] == f"trainjobs_{name}:plugin"
    for feature in ("accelerators", "tensorboard", "tf_ps_server", "managed_redis"):
        assert table[feature][1] == "trainjobs" and table[feature][3] == "-"


def test_crds_writes_one_file_per_kind(runs: dict[str, Run]) -> None:
    run = runs["crds"]
    assert run.returncode == 0, run.stderr
    out = Path(runs["crds-dir"].args[0])
    names = sorted(p.name for p in out.iterdir())
    assert names == ["trainjobs.io_caffe2jobs.yaml", "trainjobs.io_mxjobs.yaml",
                     "trainjobs.io_tfjobs.yaml"]
    assert run.stdout.splitlines() == [f"wrote {out / n}" for n in names]
    for name in names:
        crd = yaml.load((out / name).read_text(), Loader=yaml.CSafeLoader)
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["spec"]["names"]["plural"] == name.split("_")[1].removesuffix(".yaml")


def test_module_entry_point_and_console_script_agree() -> None:
    # `trainjobs` (the console script) is `trainjobs.cli:main`, which `python -m` runs too.
    from importlib import metadata

    (script,) = [ep for ep in metadata.entry_points(group="console_scripts")
                 if ep.name == "trainjobs"]
    assert script.value == "trainjobs.cli:main"
