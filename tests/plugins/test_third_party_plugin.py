"""A third-party plugin, pip-installed beside trainjobs in a fresh virtualenv, works everywhere.

The module makes one fresh venv (uv, from copies of the sources, non-editable: `pip install
trainjobs trainjobs-pytorch` as a user would) and checks, with nothing but that venv's
commands:

- `trainjobs plugins` lists `pytorch` from the `trainjobs-pytorch` package; `py.typed` ships
  with both, and the plugin passes mypy --strict against the installed trainjobs;
- the plugin's own test suite passes there (it uses only the public API and trainjobs.testing);
- `trainjobs crds -o DIR` writes its CRD, category `trainjobs`;
- on the real control plane (`kube_cluster`): the CRD applies, `kubectl get trainjobs` lists a
  PyTorchJob, and the operator from the venv reconciles it to Succeeded (KWOK ends the master
  with exit code 0; the workers run until cleaned up), with Kubeflow's environment in its pods;
- `trainjobs run` from the venv trains the example for real — torch.distributed over Gloo, one
  master and two workers, the gloo framework venv first on PATH — to Succeeded, the loss
  falling and every rank ending with the same parameters.

Nothing is skipped: whatever cannot be built or started fails the test that needs it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from trainjobs.testing import EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION, ControlPlane

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "examples" / "plugins" / "trainjobs-pytorch"
EXAMPLE = PLUGIN / "examples" / "pytorch-gloo.yaml"
RESULT_PREFIX = "TRAINJOBS_RESULT "
# What a trainjobs distribution is built from (pyproject.toml: packages in "." and "plugins").
TRAINJOBS_SOURCES = ("pyproject.toml", "README.md", "trainjobs", "plugins")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist",
                                 ".mypy_cache", ".pytest_cache", ".ruff_cache")

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: Callable[[], str] | str,
             timeout: float = 60.0, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for "
                                 f"{what() if callable(what) else what}")
        time.sleep(interval)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak the dev venv or the outer pytest
    into the fresh venv's commands."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "KUBECONFIG")
           and not k.startswith("PYTEST_")}
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; on a time-out SIGTERM its process group first (so
    `trainjobs run` stops its replicas), then SIGKILL it."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env or clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{' '.join(argv)} did not finish in {timeout}s:\n{out[-6000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (f"{' '.join(map(str, result.args))} exited "
                                    f"{result.returncode}:\n{result.stdout[-6000:]}")
    return result.stdout


# The fresh virtualenv ------------------------------------------------------------------------


@dataclass(frozen=True)
class FreshVenv:
    root: Path
    bin: Path
    plugin_src: Path  # the copy the plugin was built from, with its tests
    seconds: float

    def exe(self, name: str) -> str:
        return str(self.bin / name)

    def run(self, *argv: str, cwd: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run one of the venv's commands, by default in the venv's own directory (never in
        the repository, whose `trainjobs/` would shadow the installed one for `python -c`)."""
        return run([self.exe(argv[0]), *argv[1:]], cwd=cwd or self.root, timeout=timeout)


def _copy_sources(dest: Path) -> tuple[Path, Path]:
    trainjobs_src, plugin_src = dest / "trainjobs", dest / "trainjobs-pytorch"
    trainjobs_src.mkdir(parents=True)
    for name in TRAINJOBS_SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, trainjobs_src / name, ignore=IGNORED)
        else:
            shutil.copy2(source, trainjobs_src / name)
    shutil.copytree(PLUGIN, plugin_src, ignore=IGNORED)
    shutil.copytree(REPO / "progress", dest / "trainjobs-progress", ignore=IGNORED)
    return trainjobs_src, plugin_src


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> FreshVenv:
    """trainjobs, trainjobs-progress (as a training image installs it) and
    trainjobs-pytorch[test], non-editable, in a new venv (uv, cached wheels).

    Built from copies of the sources, so building leaves nothing (build/, *.egg-info) in the
    repository."""
    started = time.monotonic()
    root = tmp_path_factory.mktemp("third-party-plugin")
    trainjobs_src, plugin_src = _copy_sources(root / "src")
    uv = ok(run([str(REPO / "scripts" / "uv.sh")], timeout=600)).strip().splitlines()[-1]
    cache = Path(os.environ.get("TRAINJOBS_CACHE") or Path.home() / ".cache" / "trainjobs")
    env = clean_env(UV_CACHE_DIR=os.environ.get("UV_CACHE_DIR") or str(cache / "uv-cache"))
    venv = root / "venv"
    ok(run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], env=env))
    ok(run([uv, "pip", "install", "--python", str(venv / "bin" / "python"),
            str(trainjobs_src), str(trainjobs_src.parent / "trainjobs-progress"),
            f"{plugin_src}[test]"], env=env, timeout=900))
    return FreshVenv(root, venv / "bin", plugin_src, time.monotonic() - started)


def test_the_fresh_venv_lists_the_plugin_with_its_package(fresh_venv: FreshVenv) -> None:
    rows = {line.split()[0]: line.split()
            for line in ok(fresh_venv.run("trainjobs", "plugins")).splitlines()[1:]}
    assert rows["pytorch"][1:] == ["trainjobs-pytorch", "0.1.0", "PyTorchJob",
                                   "trainjobs_pytorch:plugin"]
    assert rows["mxnet"][1] == "trainjobs"  # the built-ins load beside it

    # Installed, not linked to the repository, and typed.
    where = json.loads(ok(fresh_venv.run(
        "python", "-c", "import json, trainjobs, trainjobs_pytorch; print(json.dumps("
                        "[trainjobs.__file__, trainjobs_pytorch.__file__]))")))
    site = fresh_venv.bin.parent / "lib"
    for path in map(Path, where):
        assert site in path.parents, f"{path} is not installed in the fresh venv"
        assert (path.parent / "py.typed").is_file(), f"no py.typed beside {path}"


def test_the_plugin_type_checks_against_the_installed_trainjobs(fresh_venv: FreshVenv) -> None:
    """mypy --strict (the plugin's [tool.mypy]) sees trainjobs' types only through py.typed."""
    out = ok(fresh_venv.run("mypy", "--no-incremental", cwd=fresh_venv.plugin_src))
    assert "Success: no issues found" in out


def test_the_plugins_own_test_suite_passes(fresh_venv: FreshVenv) -> None:
    """Its tests, written against the public API, run as its author's CI would run them
    (their cluster test starts its own control plane through trainjobs.testing)."""
    out = ok(fresh_venv.run("python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                            cwd=fresh_venv.plugin_src, timeout=600))
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary), out[-3000:]
    assert not re.search(r"skipped|xfail|failed|error", summary), out[-3000:]
    assert "PASSED tests/test_pytorch_plugin.py::test_the_crd_serves_on_a_real_control_plane" \
        in out


@pytest.fixture(scope="module")
def crd_dir(fresh_venv: FreshVenv) -> Path:
    out_dir = fresh_venv.root / "crds"
    out = ok(fresh_venv.run("trainjobs", "crds", "-o", str(out_dir)))
    assert f"wrote {out_dir / 'trainjobs.io_pytorchjobs.yaml'}" in out
    return out_dir


def test_trainjobs_crds_writes_the_plugins_crd(crd_dir: Path) -> None:
    assert sorted(p.name for p in crd_dir.iterdir()) == [
        "trainjobs.io_caffe2jobs.yaml", "trainjobs.io_mxjobs.yaml",
        "trainjobs.io_pytorchjobs.yaml", "trainjobs.io_tfjobs.yaml"]
    crd = yaml.safe_load((crd_dir / "trainjobs.io_pytorchjobs.yaml").read_text())
    assert crd["metadata"]["name"] == "pytorchjobs.trainjobs.io"
    assert crd["metadata"]["annotations"]["trainjobs.io/plugin-package"] == "trainjobs-pytorch"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "PyTorchJob", "pytorchjobs", ["ptj"], ["trainjobs"])


# On the real control plane -------------------------------------------------------------------


def install_crds(cluster: ControlPlane, directory: Path) -> list[str]:
    """Server-side apply every CRD in `directory`; wait until each is Established.

    (Polls the status itself: `kubectl wait --for=condition=Established`, which
    trainjobs.testing.apply_crds uses, fails outright when it asks before the API server has
    written a new CRD's first condition.)"""
    applied = cluster.kubectl("apply", "--server-side", "--force-conflicts",
                              "--field-manager=trainjobs-tests", "-f", str(directory),
                              "-o", "name").stdout.split()
    names = [n.rsplit("/", 1)[1] for n in applied if n.startswith("customresourcedefinition")]

    def established(name: str) -> bool:
        crd = json.loads(cluster.kubectl("get", "crd", name, "-o", "json").stdout)
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in crd.get("status", {}).get("conditions") or [])

    for name in names:
        wait_for(functools.partial(established, name), f"CRD {name} to be Established", 60)
    return names


def kwok_job(name: str) -> dict[str, Any]:
    """The example job, its pods ended by KWOK: the master exits 0 after 3 s, the workers run
    until they are cleaned up."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    specs = doc["spec"]["replicaSpecs"]
    specs["Master"]["template"]["metadata"] = {"annotations": {
        EXIT_CODE_ANNOTATION: "0", RUN_DURATION_ANNOTATION: "3s"}}
    specs["Worker"]["template"]["metadata"] = {"annotations": {RUN_DURATION_ANNOTATION: "1s"}}
    return doc


@contextlib.contextmanager
def operator(venv: FreshVenv, cluster: ControlPlane, namespace: str,
             workdir: Path) -> Iterator[Path]:
    """`trainjobs operator` from the fresh venv, watching one namespace, ready; yields its log.
    Stopped with SIGTERM at the end, which must exit 0."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = workdir / "operator.log"
    argv = [venv.exe("trainjobs"), "operator", "--kubeconfig", str(cluster.kubeconfig),
            "--namespace", namespace, "--http-address", f"127.0.0.1:{port}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=clean_env(),
                                cwd=workdir, start_new_session=True)

    def ready() -> bool:
        assert proc.poll() is None, f"the operator exited {proc.returncode}:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    try:
        wait_for(ready, lambda: f"the operator's /readyz:\n{log.read_text()[-3000:]}", 60)
        yield log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, f"the operator exited {proc.returncode} on SIGTERM:\n" \
                                 f"{log.read_text()[-4000:]}"


def test_the_operator_from_the_fresh_venv_reconciles_a_pytorchjob(
    fresh_venv: FreshVenv, crd_dir: Path, kube_cluster: ControlPlane, kube_namespace: str,
    tmp_path: Path,
) -> None:
    assert "pytorchjobs.trainjobs.io" in install_crds(kube_cluster, crd_dir)
    ns, name = kube_namespace, "pytorch-kwok"

    def kubectl(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return kube_cluster.kubectl("-n", ns, *args, **kw)

    kubectl("apply", "-f", "-", input=json.dumps(kwok_job(name)))
    assert kubectl("get", "trainjobs", "-o", "name").stdout.split() == [
        f"pytorchjob.trainjobs.io/{name}"]

    def job() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(kubectl("get", "ptj", name, "-o", "json").stdout)
        return found

    def pods() -> dict[str, dict[str, Any]]:
        items = json.loads(kubectl("get", "pods", "-l", f"trainjobs.io/job-name={name}",
                                   "-o", "json").stdout)["items"]
        return {p["metadata"]["name"]: p for p in items}

    with operator(fresh_venv, kube_cluster, ns, tmp_path) as log:
        expected = [f"{name}-master-0", f"{name}-worker-0", f"{name}-worker-1"]
        def all_created() -> dict[str, dict[str, Any]] | None:
            found = pods()
            return found if sorted(found) == expected else None

        created = wait_for(all_created, lambda: f"the operator to create {expected}; job "
                           f"status {job().get('status')}\n{log.read_text()[-3000:]}", 60)
        for rank, pod_name in enumerate(expected):
            pod = created[pod_name]
            (main,) = pod["spec"]["containers"]
            env = {e["name"]: e["value"] for e in main["env"]}
            assert env == {
                "MASTER_ADDR": f"{name}-master-0", "PET_MASTER_ADDR": f"{name}-master-0",
                "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456", "WORLD_SIZE": "3",
                "RANK": str(rank), "PET_NODE_RANK": str(rank), "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "1"}, pod_name
            role = pod["metadata"]["labels"].get("trainjobs.io/job-role")
            assert role == ("master" if rank == 0 else None)
        services = json.loads(kubectl("get", "services", "-o", "json").stdout)["items"]
        assert sorted(s["metadata"]["name"] for s in services) == expected

        def succeeded() -> dict[str, Any] | None:
            current: dict[str, Any] = job().get("status") or {}
            return current if current.get("state") == "Succeeded" else None

        status = wait_for(
            succeeded,
            lambda: f"{name} to succeed; status {job().get('status')}; pods "
                    f"{[(n, p['status'].get('phase')) for n, p in pods().items()]}\n"
                    f"{log.read_text()[-3000:]}", 90)
        condition = next(c for c in status["conditions"] if c["type"] == "Succeeded")
        assert condition["status"] == "True"
        # cleanPodPolicy Running: the workers still running when the master finished go.
        wait_for(lambda: not any("worker" in n and not p["metadata"].get("deletionTimestamp")
                                 for n, p in pods().items()),
                 lambda: f"the running workers to be deleted: {sorted(pods())}", 60)
        table = kubectl("get", "trainjobs").stdout
        assert re.search(rf"^pytorchjob.trainjobs.io/{name}\s+Succeeded\b", table, re.M), table


# For real: torch.distributed over Gloo ------------------------------------------------------


@pytest.fixture(scope="module")
def gloo_venv() -> Path:
    """The framework venv with torch (scripts/framework-venv.sh: a no-op once built)."""
    out = run([str(REPO / "scripts" / "framework-venv.sh"), "gloo"], timeout=3600)
    assert out.returncode == 0, f"could not build the gloo venv:\n{out.stdout[-3000:]}"
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_trainjobs_run_trains_the_example_with_torch_distributed(
    fresh_venv: FreshVenv, gloo_venv: Path, tmp_path: Path
) -> None:
    env = clean_env(PATH=os.pathsep.join([str(gloo_venv / "bin"), str(fresh_venv.bin),
                                          os.environ.get("PATH", "")]))
    result = run([fresh_venv.exe("trainjobs"), "run", "--no-color", "--run-dir",
                  str(tmp_path / "runs"), str(EXAMPLE)], cwd=tmp_path, env=env, timeout=480)
    out = ok(result)
    assert re.search(r": Succeeded in ", out), out[-3000:]
    results = [json.loads(line.split(RESULT_PREFIX, 1)[1]) for line in out.splitlines()
               if RESULT_PREFIX in line]
    assert sorted((r["role"], r["rank"]) for r in results) == [
        ("master", 0), ("worker", 1), ("worker", 2)], out[-3000:]
    for r in results:
        assert r["world_size"] == 3
        assert r["final_loss"] < r["first_loss"] / 2, r
    checksums = {r["param_checksum"] for r in results}
    assert len(checksums) == 1, f"ranks disagree: {results}"
    # The plugin's kind got the core's progress contract with no change to the plugin: the
    # ranks' trainjobs_progress reports reached the run, up to the last step.
    assert re.search(r"\[trainjobs\] progress: step \d+/30 .*loss=\S+ \[from "
                     r"pytorch-gloo-(master|worker)-\d\]", out), out[-3000:]
    assert re.search(r"  progress: step 30/30, \d+ reports, last from pytorch-gloo-", out), \
        out[-3000:]
    # Each replica's output is kept; the master joined the world at a loopback address.
    (run_dir,) = (tmp_path / "runs").iterdir()
    master_log = (run_dir / "pytorch-gloo-master-0.log").read_text()
    assert re.search(r"joined a world of 3 at 127\.0\.0\.1:\d+", master_log), master_log[-2000:]


def _results(out: str) -> list[dict[str, Any]]:
    return [json.loads(line.split(RESULT_PREFIX, 1)[1]) for line in out.splitlines()
            if RESULT_PREFIX in line]


def _run_interrupted(argv: list[str], env: dict[str, str], at_line: str,
                     timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `argv`, SIGINT it (as Ctrl-C would) once a line matches `at_line`, and read it to
    its end."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if len(lines) == 1 or not re.search(at_line, line) or \
                    any(re.search(at_line, seen) for seen in lines[:-1]):
                continue
            proc.send_signal(signal.SIGINT)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        os.killpg(proc.pid, signal.SIGKILL)
        reader.join(30)
        pytest.fail(f"{' '.join(argv)} did not finish in {timeout}s:\n{''.join(lines)[-6000:]}")
    assert proc.stdout is not None
    proc.stdout.close()
    return subprocess.CompletedProcess(argv, proc.wait(timeout=60), "".join(lines), "")


@pytest.mark.e2e
def test_the_example_checkpoints_its_state_dicts_and_resumes_from_them(
    fresh_venv: FreshVenv, gloo_venv: Path, tmp_path: Path
) -> None:
    """Issue 38 with the third-party kind: interrupted, `trainjobs run` asks the plugin's
    checkpointing replica (the Master), rank 0 saves the model's and optimizer's state_dicts;
    `--resume` has every rank load them and train from the saved step + 1."""
    steps = 40
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["runPolicy"]["checkpointTimeoutSeconds"] = 60
    for rspec in doc["spec"]["replicaSpecs"].values():
        container = rspec["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-u", str(EXAMPLE.parent / "train_ddp.py")]
        container["args"] = ["--steps", str(steps), "--step-delay", "0.1",
                             "--checkpoint-dir", str(tmp_path / "ckpt")]
    job = tmp_path / "pytorch-gloo.yaml"
    job.write_text(yaml.safe_dump(doc))
    env = clean_env(PATH=os.pathsep.join([str(gloo_venv / "bin"), str(fresh_venv.bin),
                                          os.environ.get("PATH", "")]))
    argv = [fresh_venv.exe("trainjobs"), "run", "--no-color", "--run-dir", str(tmp_path / "runs")]

    first = _run_interrupted([*argv, str(job)], env, r"master 0 step ([5-9]|\d\d) loss")
    assert first.returncode == 130, first.stdout[-4000:]
    assert "SIGINT: asking pytorch-gloo-master-0 for a checkpoint" in first.stdout
    [record] = (tmp_path / "runs").glob("pytorch-gloo-*/checkpoint.json")
    saved = json.loads(record.read_text())
    s = saved["step"]
    assert 5 <= s < steps and saved["replica"] == "pytorch-gloo-master-0", saved
    assert saved["uri"] == str(tmp_path / "ckpt" / f"step-{s}.pt")
    assert Path(saved["uri"]).is_file()
    assert f"master 0: checkpoint at step {s}: {saved['uri']}" in first.stdout
    first_loss = float(re.findall(r"master 0 step 1 loss (\S+)", first.stdout)[0])

    second = run([*argv, "--resume", str(job)], cwd=tmp_path, env=env, timeout=300)
    out = ok(second)
    assert f"resuming from the checkpoint at step {s}" in out
    results = _results(out)
    assert sorted(r["rank"] for r in results) == [0, 1, 2], out[-3000:]
    for r in results:
        assert (r["first_step"], r["steps"]) == (s + 1, steps), r
        assert r["final_loss"] < first_loss / 2, r  # on from the saved state
        assert f"{'master' if r['rank'] == 0 else 'worker'} {r['rank']}: resumed from step " \
               f"{s}" in out
    assert len({r["param_checksum"] for r in results}) == 1, results
    assert [int(n) for n in re.findall(r"master 0 step (\d+) loss", out)] == \
        list(range(s + 1, steps + 1))
