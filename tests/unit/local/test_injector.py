"""`--inject`'s live side (trainjobs/local/injector.py) on a fake clock: which process gets
which signal when, the console line each firing prints, `hang for=` resuming only the process
it stopped, and the exit order a wrapper reads. The processes are stand-ins recording the
signals; tests/unit/local/test_inject_run.py sends them to real ones."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import cast

from trainjobs.core.progress import ProgressBoard, ProgressReport
from trainjobs.local.inject import Trigger, parse_injection
from trainjobs.local.injector import WRAPPER, Injector, report_interval
from trainjobs.local.process import ProcessSpec, ReplicaProcess


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> object:
        raise NotImplementedError


class Proc:
    """What the injector reads of a ReplicaProcess, and the signals it sends."""

    def __init__(self, name: str, pid: int, attempt: int = 0) -> None:
        self.name, self.uid, self.pid, self.attempt = name, f"{name}-uid", pid, attempt
        self.restarts = 0
        self.deleting = False
        self.signals: list[signal.Signals] = []

    def signal_group(self, sig: signal.Signals) -> None:
        self.signals.append(sig)


def _report(board: ProgressBoard, replica: str, step: int, at: float) -> None:
    board.apply(ProgressReport("local", "mx", "u", replica, "worker", 0, 0, f"s-{replica}", 0,
                               step, 100, None, {}), at)


KILLED: list[int] = []  # the process groups an injector killed (none really: fake pids)


def _injector(tmp_path: Path, *texts: str) -> tuple[Injector, list[str], FakeClock]:
    lines: list[str] = []
    clock = FakeClock()
    triggers = [Trigger(parse_injection(t), "mx-worker-1") for t in texts]
    return Injector(triggers, lines.append, tmp_path, clock, KILLED.append), lines, clock


def _tick(injector: Injector, procs: dict[str, Proc], board: ProgressBoard,
          restarts: dict[str, int] | None = None) -> None:
    injector.tick(cast(dict[str, ReplicaProcess], procs), restarts or {}, board)


def test_kill_after_a_time_from_the_process_first_seen(tmp_path: Path) -> None:
    injector, lines, clock = _injector(tmp_path, "kill Worker-1 after=30s")
    board = ProgressBoard("local", "mx", "u")
    _tick(injector, {}, board)  # not running yet: nothing counts
    clock.t += 100
    worker = Proc("mx-worker-1", 41)
    _tick(injector, {"mx-worker-1": worker}, board)
    clock.t += 29.9
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [] and lines == []
    clock.t += 0.1
    worker.deleting = True  # the runner is stopping it: never a target
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [] and lines == []
    worker.deleting = False
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [signal.SIGKILL]
    assert lines == ["inject (kill Worker-1 after=30s): SIGKILL to mx-worker-1 after 30.0s, "
                     "attempt 0, restarts 0 (1 of 1)"]
    worker.pid = 42  # restarted in place: times=1 is spent
    clock.t += 100
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [signal.SIGKILL]


def test_at_step_counts_only_reports_since_the_process_started(tmp_path: Path) -> None:
    injector, lines, clock = _injector(tmp_path, "kill Worker-1 at-step=5 times=2")
    board = ProgressBoard("local", "mx", "u")
    worker = Proc("mx-worker-1", 41)
    _tick(injector, {"mx-worker-1": worker}, board)
    _report(board, "mx-worker-0", 4, clock.t + 1)
    clock.t += 1
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == []
    _report(board, "mx-worker-0", 6, clock.t + 1)  # the job's step: any replica's report
    clock.t += 1
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [signal.SIGKILL]
    assert lines[-1].endswith("at step 6, attempt 0, restarts 0 (1 of 2)")
    # recreated (a new uid): worker 0's step 6 was reported before it started
    clock.t += 1
    worker = Proc("mx-worker-1", 43)
    worker.uid = "another"
    _tick(injector, {"mx-worker-1": worker}, board, {"mx-worker-1": 1})
    assert worker.signals == []
    _report(board, "mx-worker-1", 5, clock.t + 1)
    clock.t += 1
    _tick(injector, {"mx-worker-1": worker}, board, {"mx-worker-1": 1})
    assert worker.signals == [signal.SIGKILL]
    assert lines[-1].endswith("at step 5, attempt 0, restarts 1 (2 of 2)")


def test_hang_for_resumes_only_the_process_it_stopped(tmp_path: Path) -> None:
    injector, lines, clock = _injector(tmp_path, "hang Worker-1 after=1s for=10s times=2")
    board = ProgressBoard("local", "mx", "u")
    worker = Proc("mx-worker-1", 41)
    _tick(injector, {"mx-worker-1": worker}, board)
    clock.t += 1
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [signal.SIGSTOP]
    assert lines == ["inject (hang Worker-1 after=1s for=10s times=2): SIGSTOP to mx-worker-1 "
                     "(SIGCONT in 10s) after 1.0s, attempt 0, restarts 0 (1 of 2)"]
    clock.t += 9.9
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [signal.SIGSTOP]
    clock.t += 0.1
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals == [signal.SIGSTOP, signal.SIGCONT]
    assert lines[-1] == "inject (hang Worker-1 after=1s for=10s times=2): SIGCONT to mx-worker-1"
    # the second firing's process is replaced (the stall rule restarted it) before its time
    worker.pid = 50
    _tick(injector, {"mx-worker-1": worker}, board)
    clock.t += 1
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals[-1] == signal.SIGSTOP
    worker.pid = 51
    clock.t += 20
    _tick(injector, {"mx-worker-1": worker}, board)
    assert worker.signals.count(signal.SIGCONT) == 1


def test_exit_wraps_only_its_replica_and_writes_the_order(tmp_path: Path) -> None:
    injector, lines, clock = _injector(tmp_path, "exit=3 Worker-1 after=2s")
    spec = ProcessSpec(["python3", "train.py"], {}, tmp_path, "Never")
    wrapped = injector.wrap("mx-worker-1", spec)
    assert wrapped.argv == [sys.executable, "-I", "-S", str(WRAPPER),
                            str(tmp_path / "inject"), "--", "python3", "train.py"]
    assert injector.wrap("mx-worker-0", spec) == spec
    board = ProgressBoard("local", "mx", "u")
    worker = Proc("mx-worker-1", 41)
    _tick(injector, {"mx-worker-1": worker}, board)
    clock.t += 2
    _tick(injector, {"mx-worker-1": worker}, board)
    assert (tmp_path / "inject" / "exit-41").read_text() == "3\n"
    assert worker.signals == []  # the wrapper exits by itself, with the code
    assert lines == ["inject (exit=3 Worker-1 after=2s): mx-worker-1 told to exit with code 3 "
                     "after 2.0s, attempt 0, restarts 0 (1 of 1)"]
    _tick(injector, {"mx-worker-1": worker}, board)
    assert KILLED == []  # still running: its group is left alone
    worker.pid = None  # type: ignore[assignment]  # it has exited
    _tick(injector, {"mx-worker-1": worker}, board)
    assert not (tmp_path / "inject" / "exit-41").exists()
    assert KILLED == [41]  # what its child left in the group goes


def test_replicas_report_more_often_only_when_a_trigger_waits_on_a_step() -> None:
    def triggers(*texts: str) -> list[Trigger]:
        return [Trigger(parse_injection(t), "mx-worker-1") for t in texts]

    assert report_interval(triggers("kill Worker-1 after=3s"), 1.0) == 1.0
    assert report_interval(triggers("kill Worker-1 after=3s", "hang PS at-step=9"), 1.0) == 0.2
    assert report_interval([], 1.0) == 1.0
