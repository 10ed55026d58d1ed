"""What every benchmark shares: the control plane, a raw aiohttp client, an independent
watcher, the operator as a child process, the API server's write counters and audit log.

Why a raw aiohttp client for the bench side: the watcher and the ceiling must cost as little
as possible and must not share code with the operator under test (kubernetes-asyncio), so the
ceiling really is "the same objects, created by the thinnest client there is".
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import platform
import re
import shlex
import signal
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from trainjobs.testing import (
    AUDIT_WRITES,
    EXIT_CODE_ANNOTATION,
    K8S_VERSION,
    KWOK_VERSION,
    RUN_DURATION_ANNOTATION,
    ClusterOptions,
    ControlPlane,
    agent_of,
    apply_crds,
)
from trainjobs.testing._process import free_ports

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "docs" / "benchmarks"
BENCH_UA = "trainjobs-bench"
CEILING_UA = "trainjobs-bench-ceiling"
JOB_LABEL = "trainjobs.io/job-name"
# The ceiling's objects carry this label instead, so no operator informer selects them.
CEILING_JOB_LABEL = "bench.trainjobs.io/job-name"
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
DEFAULT_OPERATOR_CMD = (
    "{python} -m trainjobs.cli operator --kubeconfig {kubeconfig} "
    "--http-address 127.0.0.1:{port} --log-level warning --concurrency {concurrency} "
    "--namespace {namespace}"
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- machine ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                capture_output=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "trainjobs"], cwd=REPO,
                               text=True, capture_output=True, check=False).stdout.strip()
        if dirty:
            commit += "+dirty"
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kubernetes": K8S_VERSION,
        "kwok": KWOK_VERSION,
        "commit": commit,
        "loadavg_at_start": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def write_result(name: str, data: dict[str, Any], out: Path | None = None) -> Path:
    path = out or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    log(f"results written to {path}")
    return path


def stats(values: Sequence[float]) -> dict[str, float]:
    """min/median/max plus p50/p90/p99 (nearest rank) of `values`."""
    if not values:
        return {"n": 0}
    s = sorted(values)

    def rank(p: float) -> float:
        return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]

    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return {"n": len(s), "min": s[0], "median": median, "max": s[-1],
            "p50": rank(50), "p90": rank(90), "p99": rank(99)}


# -- control plane ------------------------------------------------------------------------------


@dataclass
class Cluster:
    """A control plane sized for the benchmark, the CRDs installed, audit logging on writes."""

    plane: ControlPlane
    audit_log: Path | None

    @classmethod
    def start(cls, workdir: Path, *, nodes: int, node_pods: int, audit: bool = True,
              apiserver_args: Sequence[str] = (), scheduler_qps: int = 5000,
              controller_manager_args: Sequence[str] = ()) -> Cluster:
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        # kube-scheduler's client defaults to 50 requests/s (one bind per pod): that, not the
        # machine, would set the pace of "all pods Running". A later --config wins.
        sched = workdir / "bench-scheduler.yaml"
        sched.write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(workdir / "kubeconfig"),
                                 "qps": scheduler_qps, "burst": scheduler_qps},
            "leaderElection": {"leaderElect": False},
            "enableProfiling": False,
        }))
        options = ClusterOptions(
            nodes=nodes, node_pods=str(node_pods), node_cpu="1000", node_memory="4Ti",
            start_timeout=300.0, apiserver_args=tuple(apiserver_args),
            audit_policy=AUDIT_WRITES if audit else None,
            scheduler_args=(f"--config={sched}",),
            controller_manager_args=tuple(controller_manager_args))
        log(f"starting control plane: {nodes} KWOK nodes x {node_pods} pods in {workdir}")
        plane = ControlPlane.start(workdir, options)
        try:
            apply_crds(plane.kubeconfig, REPO / "crds", timeout=120)
        except BaseException:
            plane.stop()
            raise
        log(f"control plane ready in {plane.timings.get('total', 0):.1f}s: {plane.server}")
        return cls(plane, plane.audit_log)

    def stop(self) -> None:
        self.plane.stop()

    def audit_offset(self) -> int:
        return self.plane.audit_offset()

    def audit_since(self, offset: int) -> list[dict[str, Any]]:
        """Audit events (writes) logged after `offset` bytes."""
        return self.plane.audit_events(offset)


_BENCH_AGENTS = ((CEILING_UA, "ceiling"), (BENCH_UA, "bench"))


def audit_writes(events: Iterable[dict[str, Any]], namespace: str | None = None
                 ) -> dict[str, Counter[str]]:
    """Writes per component, keyed `VERB resource[/subresource]`."""
    out: dict[str, Counter[str]] = {}
    for ev in events:
        ref = ev.get("objectRef") or {}
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        res = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource")
                                          else "")
        who = agent_of(ev.get("userAgent", ""), _BENCH_AGENTS)
        out.setdefault(who, Counter())[f"{ev.get('verb', '?')} {res}"] += 1
    return out


# -- API client ---------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:300]}")
        self.status = status


class Api:
    """A thin aiohttp client with the admin certificate; JSON in, JSON out."""

    def __init__(self, plane: ControlPlane, user_agent: str = BENCH_UA, pool: int = 128) -> None:
        ctx = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        ctx.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
        self.server = plane.server
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool, ssl=ctx),
            headers={"User-Agent": user_agent, "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(self, verb: str, path: str, body: Any = None, *,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None, timeout: float = 60.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(verb, self.server + path, data=data, headers=headers,
                                        params=params,
                                        timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            raw = await resp.read()
            if resp.status >= 300:
                raise ApiError(resp.status, raw.decode(errors="replace"))
            return json.loads(raw) if raw else None

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("POST", path, body)

    async def create_ok(self, path: str, body: dict[str, Any], retries: int = 20) -> None:
        """POST; 409 counts as done; 429/5xx/connection errors retried with back-off."""
        delay = 0.05
        for attempt in range(retries):
            try:
                await self.request("POST", path, body)
                return
            except ApiError as exc:
                if exc.status == 409:
                    return
                if (exc.status != 429 and exc.status < 500) or attempt == retries - 1:
                    raise
            except (aiohttp.ClientError, TimeoutError):
                if attempt == retries - 1:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("PATCH", path, body,
                                  content_type="application/merge-patch+json")

    async def metrics(self) -> str:
        async with self.session.get(self.server + "/metrics") as resp:
            return await resp.text()

    async def watch(self, path: str, resource_version: str,
                    params: dict[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        query = {"watch": "true", "allowWatchBookmarks": "true",
                 "resourceVersion": resource_version, "timeoutSeconds": "3600", **(params or {})}
        async with self.session.get(self.server + path, params=query,
                                    timeout=aiohttp.ClientTimeout(total=None)) as resp:
            if resp.status >= 300:
                raise ApiError(resp.status, (await resp.read()).decode(errors="replace"))
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)

    async def ensure_namespace(self, name: str) -> None:
        await self.create_ok("/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name}})


async def gather_limited(limit: int, aws: Iterable[Any]) -> list[Any]:
    """Run the awaitables with at most `limit` in flight (a pool of workers on one iterator)."""
    it = iter(enumerate(aws))
    results: dict[int, Any] = {}

    async def worker() -> None:
        for i, aw in it:
            results[i] = await aw

    await asyncio.gather(*(worker() for _ in range(limit)))
    return [results[i] for i in sorted(results)]


# -- apiserver write counters -------------------------------------------------------------------

_METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def write_counters(api: Api) -> Counter[str]:
    """apiserver_request_total of write verbs, keyed `VERB group/resource[/subresource]`."""
    out: Counter[str] = Counter()
    for line in (await api.metrics()).splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("verb") not in WRITE_VERBS:
            continue
        res = labels.get("resource", "")
        if labels.get("group"):
            res = f"{labels['group']}/{res}"
        if labels.get("subresource"):
            res += f"/{labels['subresource']}"
        out[f"{labels['verb']} {res}"] += int(float(m.group("value")))
    return out


def counter_diff(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in sorted(after)
            if after[k] - before.get(k, 0)}


# Writes the operator makes (and nothing else makes in a bench namespace while it runs):
# pods and Services it creates or deletes, the job status it patches, the Events it records.
def operator_write_keys(plural: str, group: str = "trainjobs.io") -> dict[str, tuple[str, ...]]:
    return {
        "pods": ("POST pods", "DELETE pods"),
        "services": ("POST services", "DELETE services"),
        "status": (f"PATCH {group}/{plural}/status", f"PUT {group}/{plural}/status",
                   f"APPLY {group}/{plural}/status"),
        "job_updates": (f"PATCH {group}/{plural}", f"PUT {group}/{plural}"),
        "events": ("POST events", "PATCH events", "PUT events"),
    }


def attribute(diff: dict[str, int], plural: str) -> dict[str, int]:
    out = {}
    for name, keys in operator_write_keys(plural).items():
        out[name] = sum(diff.get(k, 0) for k in keys)
    return out


# -- CPU accounting ------------------------------------------------------------------------------


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields[:8]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _CLK_TCK, sum(ticks) / _CLK_TCK


def cpu_snapshot(plane: ControlPlane, operator: OperatorProcess | None = None
                 ) -> dict[str, float]:
    """CPU seconds used so far by each control-plane daemon, the operator, this bench process
    and the whole machine (`machine_busy`)."""
    out = {}
    for name, pid in plane.pids.items():
        st = _proc_stat(pid)
        out[name] = st[1] if st else 0.0
    if operator is not None and operator.proc is not None:
        out["operator"] = operator.footprint()["cpu_s"]
    t = os.times()
    out["bench"] = t.user + t.system
    out["machine_busy"], out["machine_total"] = machine_cpu()
    return out


def cpu_diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """CPU seconds per component between two snapshots; `others` is the machine's busy time
    not accounted to any of them (other users of the machine)."""
    out = {k: round(after[k] - before.get(k, 0.0), 2) for k in after
           if k not in ("machine_busy", "machine_total")}
    busy = after["machine_busy"] - before["machine_busy"]
    out["others"] = round(busy - sum(out.values()), 2)
    out["machine_busy"] = round(busy, 2)
    out["machine_capacity"] = round(after["machine_total"] - before["machine_total"], 2)
    return out


# -- the operator process -----------------------------------------------------------------------

_LIBC = ctypes.CDLL(None, use_errno=True)
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _pdeathsig() -> None:  # pragma: no cover - runs in the child
    _LIBC.prctl(1, signal.SIGKILL)


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(session id, utime+stime seconds) of `pid`."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = raw[raw.rfind(")") + 2:].split()
    return int(f[3]), (int(f[11]) + int(f[12])) / _CLK_TCK


def _proc_mem(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB."""
    rss = hwm = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


class OperatorProcess:
    """The operator under test, as a child process in its own session.

    `command` is a template: {python} {kubeconfig} {port} {namespace} {concurrency} are filled
    in. Footprint figures cover every process of its session (a wrapper shell included).
    """

    def __init__(self, command: str, *, kubeconfig: Path, namespace: str, concurrency: int,
                 log_path: Path, ready_path: str | None = "/readyz",
                 python: str = sys.executable) -> None:
        self.port = free_ports(1)[0]
        self.argv = shlex.split(command.format(
            python=python, kubeconfig=kubeconfig, port=self.port, namespace=namespace,
            concurrency=concurrency))
        self.log_path = log_path
        self.ready_path = ready_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.samples: list[tuple[float, int, float]] = []  # (time, rss KiB, cpu s)
        self._sampler: asyncio.Task[None] | None = None
        self.peak_hwm_kb = 0
        self.cpu_at_stop = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _pids(self) -> list[int]:
        sid = self.pid
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _proc_stat(int(entry))
                if st is not None and st[0] == sid:
                    pids.append(int(entry))
        return pids or [sid]

    def footprint(self) -> dict[str, float]:
        """rss_mb (now), hwm_mb (peak, summed over the session's processes), cpu_s."""
        rss = hwm = 0
        cpu = 0.0
        for pid in self._pids():
            r, h = _proc_mem(pid)
            rss += r
            hwm += h
            st = _proc_stat(pid)
            cpu += st[1] if st else 0.0
        self.peak_hwm_kb = max(self.peak_hwm_kb, hwm)
        return {"rss_mb": rss / 1024, "hwm_mb": hwm / 1024, "cpu_s": cpu}

    async def start(self, timeout: float = 300.0) -> float:
        """Start it and wait until ready; returns the seconds that took."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=REPO, start_new_session=True, preexec_fn=_pdeathsig)
        log(f"operator pid {self.proc.pid}: {' '.join(self.argv)}")
        await self.wait_ready(timeout)
        self._sampler = asyncio.create_task(self._sample())
        return time.perf_counter() - t0

    async def wait_ready(self, timeout: float) -> None:
        if self.ready_path is None:
            await asyncio.sleep(5)
            return
        url = f"http://127.0.0.1:{self.port}{self.ready_path}"
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as s:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"operator exited with {self.proc.returncode}; log "
                                       f"{self.log_path}:\n{self.log_tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"operator not ready after {timeout}s; log "
                                       f"{self.log_path}:\n{self.log_tail()}")
                await asyncio.sleep(0.05)

    async def _sample(self) -> None:
        t0 = time.perf_counter()
        while True:
            fp = self.footprint()
            self.samples.append((time.perf_counter() - t0, int(fp["rss_mb"] * 1024),
                                 fp["cpu_s"]))
            await asyncio.sleep(1.0)

    async def gc_pauses(self) -> dict[str, Any]:
        """Its garbage-collector pauses since it started, by generation, from its /metrics
        (trainjobs_gc_pause_seconds); {} for an operator without that metric."""
        try:
            async with aiohttp.ClientSession() as session, session.get(
                    f"http://127.0.0.1:{self.port}/metrics",
                    timeout=aiohttp.ClientTimeout(total=10)) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return {}
        out: dict[str, Any] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "trainjobs_gc_pause_seconds":
                continue
            for sample in family.samples:
                gen = sample.labels.get("generation", "")
                entry = out.setdefault(gen, {"buckets": {}})
                if sample.name.endswith("_bucket"):
                    entry["buckets"][sample.labels["le"]] = sample.value
                elif sample.name.endswith("_count"):
                    entry["count"] = sample.value
                elif sample.name.endswith("_sum"):
                    entry["sum_seconds"] = sample.value
        return out

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self) -> int | None:
        """SIGTERM its session, SIGKILL after 15 s; returns its exit code."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        with contextlib.suppress(Exception):
            fp = self.footprint()
            self.cpu_at_stop = fp["cpu_s"]
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + wait
            while self.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if self.proc.poll() is not None:
                break
        return self.proc.poll()

    def kill_now(self) -> None:
        """Synchronous last resort (used from `finally` when the loop is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)


# -- job manifests ------------------------------------------------------------------------------


def tfjob(name: str, namespace: str, *, workers: int, chief_run: str | None,
          worker_run: str | None, exit_code: int = 0) -> dict[str, Any]:
    """A TfJob: a Chief and `workers` Workers. A `*_run` duration makes KWOK end that pod
    with `exit_code` that long after it started; None: it runs until told otherwise."""

    def template(run: str | None) -> dict[str, Any]:
        annotations = {} if run is None else {EXIT_CODE_ANNOTATION: str(exit_code),
                                              RUN_DURATION_ANNOTATION: run}
        return {
            "metadata": {"annotations": annotations} if annotations else {},
            "spec": {"containers": [{
                "name": "tensorflow",
                "image": "example.invalid/bench-trainer:1",
                "command": ["python", "-u", "train.py"],
            }]},
        }

    specs: dict[str, Any] = {"Chief": {"replicas": 1, "template": template(chief_run)}}
    if workers:
        specs["Worker"] = {"replicas": workers, "template": template(worker_run)}
    return {
        "apiVersion": "trainjobs.io/v1alpha1",
        "kind": "TfJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicaSpecs": specs},
    }


def tfjob_path(namespace: str, name: str = "") -> str:
    tail = f"/{name}" if name else ""
    return f"/apis/trainjobs.io/v1alpha1/namespaces/{namespace}/tfjobs{tail}"


def rendered_objects(job: dict[str, Any], owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The Services and pods the operator would create for `job` (rendered by the same code),
    relabelled for the ceiling: `CEILING_JOB_LABEL` instead of the job-name label, owned by
    `owner` (an object that exists, so the garbage collector leaves them alone), and without
    the annotations that make KWOK end a pod."""
    from trainjobs.core.render import render_job
    from trainjobs.core.validation import parse_job
    from trainjobs.plugin.manager import load_plugins

    plugins = _plugins_cache.get("p")
    if plugins is None:
        plugins = _plugins_cache["p"] = load_plugins()
    parsed = parse_job(job, plugins, job["metadata"]["name"])
    framework = plugins.framework_for(parsed.kind)
    assert framework is not None
    rendered = render_job(parsed, framework, plugins, backend="kubernetes")
    out = []
    for obj in [*rendered.services.values(), *rendered.pods.values()]:
        obj = json.loads(json.dumps(obj))
        meta = obj["metadata"]
        meta["labels"] = _relabel(meta.get("labels", {}))
        meta["ownerReferences"] = [owner]
        # Ceiling pods run until deleted: KWOK ending them would still be busy with that
        # when the next phase starts.
        for ann in (EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION):
            meta.get("annotations", {}).pop(ann, None)
        if obj["kind"] == "Service":
            obj["spec"]["selector"] = _relabel(obj["spec"]["selector"])
        out.append(obj)
    return out


_plugins_cache: dict[str, Any] = {}


def _relabel(labels: dict[str, str]) -> dict[str, str]:
    return {(CEILING_JOB_LABEL if k == JOB_LABEL else k): v for k, v in labels.items()}


# -- the independent watcher --------------------------------------------------------------------


@dataclass
class PodTrack:
    job: str
    seen: float
    phase: str = ""
    running: float | None = None
    ended: float | None = None


@dataclass
class JobTrack:
    seen: float
    state: str = ""
    states: dict[str, float] = field(default_factory=dict)  # first time seen in each state
    versions: int = 0  # resourceVersions seen (1 + every write the watch showed)
    log: list[tuple[float, str, str]] | None = None  # (time, state, status summary)


@dataclass
class NsCounts:
    pods: int = 0
    services: int = 0
    pods_running: int = 0  # pods seen Running (or past it) at least once
    pods_ended: int = 0
    jobs: int = 0
    jobs_in: Counter[str] = field(default_factory=Counter)  # jobs ever seen in a state
    # (time, pods+services seen so far), one point per new object: the "created" curve.
    created_series: list[tuple[float, int]] = field(default_factory=list)
    running_series: list[tuple[float, int]] = field(default_factory=list)


class Watcher:
    """Watches pods, Services and TfJobs of some namespaces and records when each object was
    first seen, when pods first ran and ended, when jobs first reached each state.

    Times are `time.perf_counter()` of the moment the event was read. Waiters are cheap:
    conditions are evaluated on per-namespace counters, not by scanning objects.
    """

    def __init__(self, api: Api, namespaces: Sequence[str], *, job_plural: str = "tfjobs",
                 keep_series: bool = True, configmap_namespaces: Sequence[str] = ()) -> None:
        self.api = api
        self.namespaces = list(namespaces)
        self.configmap_namespaces = list(configmap_namespaces)
        self.configmaps: dict[tuple[str, str], float] = {}  # first seen
        self.job_plural = job_plural
        self.keep_series = keep_series
        self.pods: dict[tuple[str, str], PodTrack] = {}
        self.services: dict[tuple[str, str], float] = {}
        self.jobs: dict[tuple[str, str], JobTrack] = {}
        self.counts: dict[str, NsCounts] = {ns: NsCounts() for ns in namespaces}
        self.job_pods: Counter[tuple[str, str]] = Counter()
        self.job_pods_full: dict[tuple[str, str], float] = {}
        self.pods_per_job = 0  # set by the bench: when a job's pods reach it, time recorded
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending_notify = False
        self.pod_hooks: dict[tuple[str, str], Callable[[PodTrack, str], None]] = {}
        self.job_hooks: dict[tuple[str, str], Callable[[JobTrack, str, float], None]] = {}
        self.synced = asyncio.Event()
        self.log_jobs = 0  # the first N jobs seen keep a log of their status versions
        self.log_names: set[str] = set()
        self._synced_count = 0
        self.events = 0

    def start(self) -> None:
        for ns in self.namespaces:
            for kind, path in (("pod", f"/api/v1/namespaces/{ns}/pods"),
                               ("svc", f"/api/v1/namespaces/{ns}/services"),
                               ("job", tfjob_path(ns).replace("tfjobs", self.job_plural))):
                self._tasks.append(asyncio.create_task(self._run(kind, ns, path)))
        for ns in self.configmap_namespaces:
            self._tasks.append(asyncio.create_task(
                self._run("cm", ns, f"/api/v1/namespaces/{ns}/configmaps")))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, kind: str, ns: str, path: str) -> None:
        rv = ""
        first = True
        while True:
            try:
                if not rv:
                    rv = await self._list(kind, ns, path)
                    if first:
                        first = False
                        self._synced_count += 1
                        if self._synced_count == 3 * len(self.namespaces) + \
                                len(self.configmap_namespaces):
                            self.synced.set()
                async for ev in self.api.watch(path, rv):
                    etype = ev.get("type")
                    obj = ev.get("object") or {}
                    if etype == "ERROR":
                        if obj.get("code") == 410:
                            rv = ""
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if etype == "BOOKMARK":
                        continue
                    self._handle(kind, ns, etype or "", obj)
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status == 410:
                    rv = ""
                log(f"watcher {kind}/{ns}: {exc}; again")
                await asyncio.sleep(0.2)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log(f"watcher {kind}/{ns}: {type(exc).__name__} {exc}; again")
                await asyncio.sleep(0.2)

    async def _list(self, kind: str, ns: str, path: str) -> str:
        cont = ""
        while True:
            params = {"limit": "500", **({"continue": cont} if cont else {})}
            page = await self.api.request("GET", path, params=params, timeout=300)
            for obj in page.get("items") or []:
                self._handle(kind, ns, "ADDED", obj)
            cont = page.get("metadata", {}).get("continue") or ""
            if not cont:
                return str(page["metadata"]["resourceVersion"])

    def _handle(self, kind: str, ns: str, etype: str, obj: dict[str, Any]) -> None:
        now = time.perf_counter()
        self.events += 1
        meta = obj.get("metadata") or {}
        key = (ns, meta.get("name", ""))
        c = self.counts.setdefault(ns, NsCounts())
        if kind == "pod":
            self._pod(c, key, etype, meta, obj.get("status") or {}, now)
        elif kind == "cm":
            if key not in self.configmaps and etype != "DELETED":
                self.configmaps[key] = now
        elif kind == "svc":
            if key not in self.services and etype != "DELETED":
                self.services[key] = now
                c.services += 1
                if self.keep_series:
                    c.created_series.append((now, c.pods + c.services))
        else:
            self._job(c, key, etype, obj, now)
        self._notify()

    def _pod(self, c: NsCounts, key: tuple[str, str], etype: str, meta: dict[str, Any],
             status: dict[str, Any], now: float) -> None:
        track = self.pods.get(key)
        if track is None:
            if etype == "DELETED":
                return
            labels = meta.get("labels") or {}
            job = labels.get(JOB_LABEL) or labels.get(CEILING_JOB_LABEL) or ""
            track = self.pods[key] = PodTrack(job, now)
            c.pods += 1
            if self.keep_series:
                c.created_series.append((now, c.pods + c.services))
            jkey = (key[0], job)
            self.job_pods[jkey] += 1
            if self.pods_per_job and self.job_pods[jkey] == self.pods_per_job:
                self.job_pods_full[jkey] = now
        phase = status.get("phase") or "Pending"
        if etype == "DELETED":
            phase = "Deleted"
        if phase == track.phase:
            return
        track.phase = phase
        if phase in ("Running", "Succeeded", "Failed") and track.running is None:
            track.running = now
            c.pods_running += 1
            if self.keep_series:
                c.running_series.append((now, c.pods_running))
        if phase in ("Succeeded", "Failed") and track.ended is None:
            track.ended = now
            c.pods_ended += 1
        hook = self.pod_hooks.get(key)
        if hook is not None:
            hook(track, phase)

    def _job(self, c: NsCounts, key: tuple[str, str], etype: str, obj: dict[str, Any],
             now: float) -> None:
        if etype == "DELETED":
            return
        track = self.jobs.get(key)
        if track is None:
            track = self.jobs[key] = JobTrack(now)
            c.jobs += 1
            if len(self.jobs) <= self.log_jobs or key[1] in self.log_names:
                track.log = []
        track.versions += 1
        status = obj.get("status") or {}
        if track.log is not None:
            counts = ";".join(f"{t}:{'/'.join(str(v.get(f, 0)) for f in ('active', 'succeeded'))}"
                              for t, v in sorted((status.get("replicaStatuses") or {}).items()))
            track.log.append((now, status.get("state") or "", counts))
        state = status.get("state") or ""
        if not state:
            true = [x["type"] for x in status.get("conditions") or []
                    if x.get("status") == "True"]
            state = true[-1] if true else ""
        if state == track.state:
            return
        track.state = state
        if state and state not in track.states:
            track.states[state] = now
            c.jobs_in[state] += 1
        hook = self.job_hooks.get(key)
        if hook is not None:
            hook(track, state, now)

    def _notify(self) -> None:
        if self._pending_notify:
            return
        self._pending_notify = True
        asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._pending_notify = False

        async def go() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(go())

    async def wait(self, check: Callable[[], bool], what: str, timeout: float) -> float:
        """Wait until `check()` holds; returns perf_counter() of the event that made it so
        (approximately: the moment the waiter saw it, right after that event)."""
        deadline = time.perf_counter() + timeout
        async with self._changed:
            while not check():
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(left, 5.0))
        return time.perf_counter()


def series_since(series: Sequence[tuple[float, int]], t0: float, every: float = 0.1
                 ) -> list[tuple[float, int]]:
    """Downsample a (time, count) series to one point per `every` seconds, times from t0."""
    out: list[tuple[float, int]] = []
    for t, n in series:
        rel = round(t - t0, 3)
        if out and rel - out[-1][0] < every:
            out[-1] = (out[-1][0], n)
        else:
            out.append((rel, n))
    return out


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP end the bench like Ctrl-C, so every `finally` (cluster, operator) runs."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
