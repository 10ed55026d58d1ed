#!/usr/bin/env python3
"""Run the example training programs as local processes with the contract environment.

Proves, without the operator, that each program trains for real against its framework:

  mxnet       1 scheduler + 2 servers + 3 workers (ps-lite, kvstore dist_sync)
  tf-mwms     chief + 1 worker (MultiWorkerMirroredStrategy from TF_CONFIG)
  tf-mwms-master  the same with the job's Master (TF_CONFIG "master", renamed for TF2)
  tf-ps       chief (coordinator) + 1 worker + 1 ps (ParameterServerStrategy)
  gloo-redis  2 shards, rendezvous through a real redis-server on a loopback port
  gloo-file   2 shards, rendezvous through a shared directory (NFS_PATH)

Every process gets only a minimal base environment (PATH, HOME, LANG, TMPDIR, and PYTHONPATH
for the progress library in progress/src) plus the variables of the contract in docs
(api.md "Environment contracts"), with 127.0.0.1 and ports allocated here; MXNet replicas
also get DMLC_NODE_HOST=127.0.0.1 (see examples/README.md). Checks: every process exits 0,
every training replica's loss fell, and all replicas that hold the model end with the same
parameter checksum.

Usage: scripts/smoke_frameworks.py [SCENARIO ...] [--steps N] [--timeout S] [--keep-logs]
Exit status 0 when every scenario passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
HOST = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def venv_python(name: str) -> str:
    out = (
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "framework-venv.sh"), name],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        .stdout.strip()
        .splitlines()
    )
    return str(Path(out[-1]) / "bin" / "python")


def base_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PYTHONUNBUFFERED"] = "1"
    # The programs report progress through trainjobs_progress (standard library only); with
    # no TRAINJOBS_PROGRESS_URL here its calls are no-ops, but the import must resolve.
    env["PYTHONPATH"] = str(ROOT / "progress" / "src")
    return env


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    trains: bool = True  # expected to report losses / a checksum

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def result(self) -> dict[str, object] | None:
        for line in reversed(self.text().splitlines()):
            if line.startswith("TRAINJOBS_RESULT "):
                return json.loads(line[len("TRAINJOBS_RESULT ") :])
        return None


@dataclass
class Scenario:
    name: str
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str], trains: bool = True) -> Proc:
        log = self.workdir / f"{name}.log"
        fh = log.open("wb")
        p = subprocess.Popen(
            argv,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,
        )
        fh.close()
        proc = Proc(name, p, log, trains)
        self.procs.append(proc)
        print(f"  started {name} (pid {p.pid})", flush=True)
        return proc

    def wait(self, timeout: float, until: list[Proc] | None = None) -> bool:
        """Wait for `until` (default: all) to exit; False on timeout."""
        deadline = time.monotonic() + timeout
        for p in until or self.procs:
            left = deadline - time.monotonic()
            try:
                p.popen.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                return False
        return True

    def stop_all(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.popen.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait()


def check(sc: Scenario, finished: bool, expect_exit: dict[str, int] | None = None) -> bool:
    ok = finished
    if not finished:
        print(f"  FAIL {sc.name}: timed out", flush=True)
    checksums: dict[str, str] = {}
    for p in sc.procs:
        rc = p.popen.returncode
        want = (expect_exit or {}).get(p.name, 0)
        res = p.result()
        if rc != want:
            ok = False
            print(f"  FAIL {p.name}: exit {rc} (want {want}); last lines:", flush=True)
            for line in p.text().splitlines()[-15:]:
                print(f"      | {line}", flush=True)
            continue
        if res is None:
            if p.trains:
                ok = False
                print(f"  FAIL {p.name}: no TRAINJOBS_RESULT line", flush=True)
            continue
        first, final = res.get("first_loss"), res.get("final_loss")
        if p.trains:
            if not (isinstance(first, float) and isinstance(final, float) and final < first):
                ok = False
                print(f"  FAIL {p.name}: loss did not fall ({first} -> {final})", flush=True)
            checksums[p.name] = str(res.get("param_checksum"))
        print(f"  {p.name}: exit {rc} {json.dumps(res, sort_keys=True)}", flush=True)
    if len(set(checksums.values())) > 1:
        ok = False
        print(f"  FAIL {sc.name}: parameter checksums differ: {checksums}", flush=True)
    elif checksums:
        same = next(iter(checksums.values()))
        print(f"  {sc.name}: {len(checksums)} replicas, identical checksum {same}", flush=True)
    print(f"  {'PASS' if ok else 'FAIL'} {sc.name}", flush=True)
    return ok


# --------------------------------------------------------------------------------------
def run_mxnet(sc: Scenario, args: argparse.Namespace) -> bool:
    py = venv_python("mxnet")
    n_srv, n_wrk = 2, 3
    ports = free_ports(1 + n_srv + n_wrk)
    cluster = {
        "scheduler": [{"url": HOST, "port": ports[0]}],
        "server": [{"url": HOST, "port": p} for p in ports[1 : 1 + n_srv]],
        "worker": [{"url": HOST, "port": p} for p in ports[1 + n_srv :]],
    }
    common = base_env() | {
        "DMLC_PS_ROOT_URI": HOST,
        "DMLC_PS_ROOT_PORT": str(ports[0]),
        "DMLC_NUM_SERVER": str(n_srv),
        "DMLC_NUM_WORKER": str(n_wrk),
        # Not in the contract; needed locally: without it ps-lite advertises the first
        # non-loopback interface's address for servers and workers.
        "DMLC_NODE_HOST": HOST,
    }
    if args.ps_verbose:
        common["PS_VERBOSE"] = "1"
    prog = [py, str(EXAMPLES / "mxnet" / "train_dist.py"), "--steps", str(args.steps)]

    def env(role: str, i: int) -> dict[str, str]:
        e = common | {
            "DMLC_ROLE": role,
            "MX_CONFIG": json.dumps(
                {"cluster": cluster, "labels": {}, "task": {"type": role, "index": i}}
            ),
        }
        if role == "worker":
            e["DMLC_WORKER_ID"] = str(i)
        return e

    sc.start("scheduler-0", prog, env("scheduler", 0), trains=False)
    for i in range(n_srv):
        sc.start(f"server-{i}", prog, env("server", i), trains=False)
    for i in range(n_wrk):
        sc.start(f"worker-{i}", prog, env("worker", i))
    return check(sc, sc.wait(args.timeout))


def tf_env(cluster: dict[str, list[str]], typ: str, i: int) -> dict[str, str]:
    tf_config = {"cluster": cluster, "task": {"type": typ, "index": i}, "environment": "cloud"}
    return base_env() | {"TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_tf_mwms(sc: Scenario, args: argparse.Namespace, chief: str = "chief") -> bool:
    py = venv_python("tensorflow")
    ports = free_ports(2)
    cluster = {chief: [f"{HOST}:{ports[0]}"], "worker": [f"{HOST}:{ports[1]}"]}
    prog = [py, str(EXAMPLES / "tensorflow" / "train_mwms.py"), "--steps", str(args.steps)]
    sc.start(f"{chief}-0", prog, tf_env(cluster, chief, 0))
    sc.start("worker-0", prog, tf_env(cluster, "worker", 0))
    return check(sc, sc.wait(args.timeout))


def run_tf_ps(sc: Scenario, args: argparse.Namespace) -> bool:
    py = venv_python("tensorflow")
    ports = free_ports(3)
    cluster = {
        "chief": [f"{HOST}:{ports[0]}"],
        "worker": [f"{HOST}:{ports[1]}"],
        "ps": [f"{HOST}:{ports[2]}"],
    }
    # The ps runs the standalone server program; the worker runs train_ps.py, which serves
    # the same way on non-chief tasks (so one command fits every replica of a TfJob).
    server = [py, str(EXAMPLES / "tensorflow" / "ps_server.py")]
    ps = sc.start("ps-0", server, tf_env(cluster, "ps", 0), trains=False)
    wk = sc.start(
        "worker-0",
        [py, str(EXAMPLES / "tensorflow" / "train_ps.py")],
        tf_env(cluster, "worker", 0),
        trains=False,
    )
    chief = sc.start(
        "chief-0",
        [py, str(EXAMPLES / "tensorflow" / "train_ps.py"), "--steps", str(args.steps)],
        tf_env(cluster, "chief", 0),
    )
    finished = sc.wait(args.timeout, until=[chief])
    # Servers run until told otherwise (server.join() never returns): as the operator
    # does once the chief has succeeded, stop them; they exit 0 on SIGTERM.
    for p in (ps, wk):
        if p.popen.poll() is None:
            p.popen.send_signal(signal.SIGTERM)
    finished = sc.wait(30) and finished
    return check(sc, finished)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server not found (apt-get install -y redis-server)")
    (port,) = free_ports(1)
    log = (workdir / "redis.log").open("wb")
    p = subprocess.Popen(
        [
            exe,
            "--bind",
            HOST,
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--daemonize",
            "no",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection((HOST, port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or p.poll() is not None:
                raise SystemExit(
                    f"redis-server did not start: {(workdir / 'redis.log').read_text()}"
                )
            time.sleep(0.1)
        print(f"  redis-server on {HOST}:{port} (pid {p.pid})", flush=True)
        yield port
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def redis_command_stats(port: int) -> dict[str, int]:
    """Calls per command from INFO commandstats: proof that the rendezvous used Redis."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(b"INFO commandstats\r\n")
        data = b""
        while b"\r\n" not in data:
            data += s.recv(65536)
        header, _, body = data.partition(b"\r\n")  # RESP bulk string: $<len>\r\n<body>\r\n
        size = int(header[1:])
        while len(body) < size:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    stats = {}
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("cmdstat_"):
            name, _, rest = line[len("cmdstat_") :].partition(":")
            stats[name] = int(rest.split(",")[0].split("=")[1])
    return stats


def run_gloo(sc: Scenario, args: argparse.Namespace, backend: str) -> bool:
    py = venv_python("gloo")
    n = 2
    ports = free_ports(n)
    run_id = f"smoke-{backend}-{os.getpid()}-{int(time.time())}"
    prog = [py, str(EXAMPLES / "caffe2" / "train_gloo.py"), "--steps", str(args.steps)]

    def env(i: int, extra: dict[str, str]) -> dict[str, str]:
        cfg = {
            "cluster": {"worker": [f"{HOST}:{p}" for p in ports]},
            "task": {"type": "worker", "index": i},
        }
        return (
            base_env()
            | extra
            | {
                "SHARD_ID": str(i),
                "NUM_SHARDS": str(n),
                "RUN_ID": run_id,
                "CAFFE2_CONFIG": json.dumps(cfg),
                # Gloo picks the interface from the hostname; locally pin it to loopback.
                "GLOO_SOCKET_IFNAME": "lo",
            }
        )

    if backend == "redis":
        with redis_server(sc.workdir) as port:
            for i in range(n):
                sc.start(f"shard-{i}", prog, env(i, {"REDIS_HOST": HOST, "REDIS_PORT": str(port)}))
            ok = check(sc, sc.wait(args.timeout))
            stats = redis_command_stats(port)
            print(f"  redis commands served: {stats}", flush=True)
            if not stats.get("set") or not stats.get("exists"):
                print("  FAIL gloo-redis: the rendezvous did not go through redis", flush=True)
                ok = False
            return ok
    nfs = sc.workdir / "nfs"
    nfs.mkdir()
    for i in range(n):
        sc.start(f"shard-{i}", prog, env(i, {"NFS_PATH": str(nfs)}))
    return check(sc, sc.wait(args.timeout))


SCENARIOS = {
    "mxnet": run_mxnet,
    "tf-mwms": run_tf_mwms,
    "tf-mwms-master": lambda sc, a: run_tf_mwms(sc, a, chief="master"),
    "tf-ps": run_tf_ps,
    "gloo-redis": lambda sc, a: run_gloo(sc, a, "redis"),
    "gloo-file": lambda sc, a: run_gloo(sc, a, "file"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=" | ".join(SCENARIOS))
    ap.add_argument(
        "--steps", type=int, default=None, help="training steps (program default if unset)"
    )
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--ps-verbose", action="store_true", help="PS_VERBOSE=1 for ps-lite")
    args = ap.parse_args()
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    if args.steps is None:
        args.steps = 20
    results = {}
    top = Path(tempfile.mkdtemp(prefix="trainjobs-smoke-"))
    try:
        for name in names:
            print(f"== {name}", flush=True)
            sc = Scenario(name, top / name)
            sc.workdir.mkdir()
            t0 = time.monotonic()
            try:
                results[name] = SCENARIOS[name](sc, args)
            finally:
                sc.stop_all()
            print(f"  ({time.monotonic() - t0:.1f}s)", flush=True)
    finally:
        if args.keep_logs:
            print(f"logs kept in {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    passed = sum(results.values())
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
