"""Hostile files through every command that reads a job file, run as the real `trainjobs`
command in its own process: `render`, `run`, `convert` and `submit`.

Each file once gave a traceback (a `kind` that is a list or a mapping, bytes that are not
UTF-8), killed the process (50,000 nested `[`: SIGSEGV in PyYAML's C loader; 10,000:
RecursionError) or hung `convert` (aliases nested nine by nine; an alias inside itself). Each
must now give exit 2, stderr naming the file and, on one line, what is wrong, and no
traceback. `submit` is pointed at a kubeconfig whose API server is a port
nothing listens on: the file must be refused before any cluster contact (a valid job with the
same kubeconfig exits 4, cannot reach the cluster, which shows where the kubeconfig points).
The other shapes of each problem (block nesting, flow mappings, `apiVersion`, the settings
files) are read in-process by tests/unit/test_yaml_bounds.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from trainjobs.testing._process import free_ports
from trainjobs.yamlio import MAX_DEPTH

from .helpers import mxjob

_JOB = yaml.safe_dump(mxjob("hostile"), sort_keys=False)
_LAUGHS = "".join(
    [f"x0: &a0 [{', '.join(['lol'] * 9)}]\n"]
    + [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)])

# id: (file bytes, words the problem line must hold)
HOSTILE: dict[str, tuple[bytes, list[str]]] = {
    "kind-is-a-list": (_JOB.replace("kind: MxJob", "kind: [MxJob]").encode(),
                       ["kind: must be a string, got a list"]),
    "kind-is-a-mapping": (_JOB.replace("kind: MxJob", "kind: {a: 1}").encode(),
                          ["kind: must be a string, got a dict"]),
    "utf16-mark-then-not-utf16": (b"\xff\xfea\x00:\x00 \x00\x00\xd8",
                                  ["not UTF-16-LE text", "save the file as UTF-8"]),
    "latin-1": (_JOB.replace("hostile", "caf\u00e9").encode("latin-1"),
                ["not UTF-8 text: line 4", "0xe9", "save the file as UTF-8"]),
    "50000-nested-flow": (b"[" * 50_000,
                          [f"invalid YAML: line 1, column {MAX_DEPTH + 1}",
                           f"nested deeper than {MAX_DEPTH} levels"]),
    "billion-laughs": ((_JOB + _LAUGHS).encode(), ["aliases expand to more than 100,000 nodes"]),
    "contains-itself": ((_JOB + "loop: &l [*l]\n").encode(),
                        ["an alias inside the collection it names"]),
}
COMMANDS = ("render", "run", "convert", "submit")


@dataclass(frozen=True)
class Run:
    path: Path
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    tmp = tmp_path_factory.mktemp("hostile")
    (port,) = free_ports(1)  # free now and nobody listens: an API server that is not there
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "nobody", "user": {"token": "x"}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "nobody"}}],
    }))
    env = {k: v for k, v in os.environ.items() if k != "TRAINJOBS_DISABLE_PLUGINS"}
    env.update(TRAINJOBS_DISABLE_PLUGIN_AUTOLOAD="1", KUBECONFIG=str(kubeconfig))
    good = tmp / "good.yaml"
    good.write_text(_JOB)
    calls: dict[str, tuple[str, Path]] = {"submit:good": ("submit", good)}
    for name, (content, _) in HOSTILE.items():
        path = tmp / f"{name}.yaml"
        path.write_bytes(content)
        calls.update({f"{command}:{name}": (command, path) for command in COMMANDS})

    def call(item: tuple[str, tuple[str, Path]]) -> tuple[str, Run]:
        key, (command, path) = item
        done = subprocess.run([sys.executable, "-m", "trainjobs.cli", command, str(path)],
                              cwd=tmp, capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        return key, Run(path, done.returncode, done.stdout, done.stderr)

    with ThreadPoolExecutor(max_workers=max(os.cpu_count() or 2, 2)) as pool:
        yield dict(pool.map(call, calls.items()))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_file_exit_2_one_line_no_traceback(runs: dict[str, Run], case: str,
                                                   command: str) -> None:
    run = runs[f"{command}:{case}"]
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr + run.stdout
    assert run.stdout == ""
    header, *problems = run.stderr.strip().splitlines()
    assert len(problems) == 1, run.stderr
    # convert gathers every file's refusals under one header, each line naming its file
    assert str(run.path) in (problems[0] if command == "convert" else header), run.stderr
    for word in HOSTILE[case][1]:
        assert word in problems[0], f"{word!r} not in:\n{run.stderr}"


def test_submit_of_a_valid_job_does_reach_for_the_cluster(runs: dict[str, Run]) -> None:
    """The control for `submit`: the refusals above came before any cluster contact."""
    run = runs["submit:good"]
    assert run.returncode == 4, run.stderr
    assert "cannot reach the cluster" in run.stderr
