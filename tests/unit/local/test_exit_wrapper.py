"""The exit wrapper (trainjobs/local/exit_wrapper.py) as the runner starts it: it exits as
its child does (a code, or death by the same signal), and exits with the code written into
`DIR/exit-<its pid>` once told, its child killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainjobs.local.injector import WRAPPER


def _start(tmp_path: Path, program: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-I", "-S", str(WRAPPER), str(tmp_path), "--",
                             sys.executable, "-c", program], start_new_session=True)


def test_it_exits_with_its_childs_code(tmp_path: Path) -> None:
    assert _start(tmp_path, "import sys; sys.exit(5)").wait(30) == 5
    assert _start(tmp_path, "pass").wait(30) == 0


def test_it_dies_of_the_signal_its_child_died_of(tmp_path: Path) -> None:
    program = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert _start(tmp_path, program).wait(30) == -signal.SIGTERM


def test_told_it_kills_its_child_and_exits_with_the_code(tmp_path: Path) -> None:
    marker = tmp_path / "child-done"
    program = f"import time; time.sleep(30); open({str(marker)!r}, 'w').close()"
    wrapper = _start(tmp_path, program)
    time.sleep(0.5)
    assert wrapper.poll() is None
    (tmp_path / f"exit-{wrapper.pid}").write_text("42\n")
    assert wrapper.wait(10) == 42
    assert not marker.exists()


def test_a_sigterm_to_the_group_reaches_the_child_not_the_wrapper(tmp_path: Path) -> None:
    program = ("import signal, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *_: sys.exit(9))\n"
               "print('ready', flush=True)\n"
               "time.sleep(30)\n")
    wrapper = subprocess.Popen([sys.executable, "-I", "-S", str(WRAPPER), str(tmp_path), "--",
                                sys.executable, "-c", program], start_new_session=True,
                               stdout=subprocess.PIPE)
    assert wrapper.stdout is not None
    assert wrapper.stdout.readline() == b"ready\n"
    os.killpg(wrapper.pid, signal.SIGTERM)
    assert wrapper.wait(10) == 9  # the child's own answer to SIGTERM
    wrapper.stdout.close()
