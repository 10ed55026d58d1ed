"""The package as it would be published: `uv build` makes an sdist and, from that sdist, a
wheel; the wheel installs into a fresh venv (its dependencies from uv.lock) and works there
with nothing of the source tree: `trainjobs plugins` lists the built-in kinds, `trainjobs
render` renders every example, `trainjobs crds` prints a CRD per kind. (No cluster needed; it
lives here because it builds and installs, which takes tens of seconds.)"""

from __future__ import annotations

import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*/*.yaml"))


def uv() -> str:
    out = subprocess.run(["bash", str(REPO / "scripts" / "uv.sh")], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    return out.strip().splitlines()[-1]


def run(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                            check=False, env=env)
    assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_sdist_and_wheel_install_into_a_fresh_venv_and_work(tmp_path: Path) -> None:
    tool = uv()
    cache = os.environ.get("TRAINJOBS_CACHE", str(Path.home() / ".cache" / "trainjobs"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "KUBECONFIG")}
    env.setdefault("UV_CACHE_DIR", f"{cache}/uv-cache")
    dist = tmp_path / "dist"
    run(tool, "build", "--quiet", "--out-dir", str(dist), str(REPO), cwd=tmp_path, env=env)
    sdists, wheels = list(dist.glob("trainjobs-*.tar.gz")), list(dist.glob("trainjobs-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, list(dist.iterdir())

    names = zipfile.ZipFile(wheels[0]).namelist()
    for shipped in ("trainjobs/py.typed", "trainjobs/api/schemas/pod-template-spec.json",
                    "trainjobs/testing/kwok_stages.yaml", "trainjobs_mxnet/__init__.py",
                    "trainjobs/client/__init__.py"):
        assert shipped in names, shipped
    assert not [n for n in names if n.startswith("tests/")], "tests in the wheel"
    with tarfile.open(sdists[0]) as sdist:
        assert any(n.endswith("/pyproject.toml") for n in sdist.getnames())

    venv = tmp_path / "venv"
    run(tool, "venv", "--quiet", "--python", env.get("UV_PYTHON", "python3.11"), str(venv),
        cwd=tmp_path, env=env)
    locked = tmp_path / "requirements.txt"
    run(tool, "export", "--quiet", "--frozen", "--no-emit-project", "--project", str(REPO),
        "-o", str(locked), cwd=tmp_path, env=env)
    run(tool, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
        "--require-hashes", "-r", str(locked), cwd=tmp_path, env=env)
    run(tool, "pip", "install", "--quiet", "--no-deps", "--python", str(venv / "bin" / "python"),
        str(wheels[0]), cwd=tmp_path, env=env)

    trainjobs = str(venv / "bin" / "trainjobs")
    where = run(str(venv / "bin" / "python"), "-c", "import trainjobs; print(trainjobs.__file__)",
                cwd=tmp_path, env=env)
    assert where.startswith(str(venv)), where  # the installed copy, not the source tree
    plugins = run(trainjobs, "plugins", cwd=tmp_path, env=env)
    for kind in ("MxJob", "TfJob", "Caffe2Job"):
        assert kind in plugins, plugins
    assert len(EXAMPLES) >= 4
    for example in EXAMPLES:
        docs = list(yaml.safe_load_all(run(trainjobs, "render", str(example), cwd=tmp_path,
                                           env=env)))
        assert {"Pod", "Service"} <= {d["kind"] for d in docs if d}, example
    crds = [d for d in yaml.safe_load_all(run(trainjobs, "crds", cwd=tmp_path, env=env)) if d]
    assert {c["spec"]["names"]["kind"] for c in crds} >= {"MxJob", "TfJob", "Caffe2Job"}
