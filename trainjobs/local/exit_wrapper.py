"""The replica's main process when an `--inject exit=CODE` targets it: runs the replica's
command as its child and, asked to, makes the replica exit with CODE.

Why a wrapper: an exit code is chosen by the process that exits; no signal makes a program
exit with 3. So, like a container's init (tini), this process is the one `trainjobs run`
watches: it exits as its child does (the same code; killed by signal N, it kills itself with
N) and, when trainjobs writes a code into `DIR/exit-<its pid>`, it SIGKILLs the child and
exits with that code, which the runner then observes through wait() like any exit.
Processes the child left in the group are killed by the injector once this one has exited,
as the processes of a container go when its main process exits.

Run as a script (`python -I -S exit_wrapper.py DIR -- COMMAND...`): standard library only,
no trainjobs import, so it starts fast under any interpreter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

POLL_SECONDS = 0.05


def _ignore(_signum: int, _frame: object) -> None:
    """SIGTERM/SIGINT reach the whole group: the child acts on them, this waits for it (a
    handler, not SIG_IGN, so the child does not inherit the ignoring)."""


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: exit_wrapper.py DIR -- COMMAND...", file=sys.stderr)
        return 2
    order = os.path.join(argv[0], f"exit-{os.getpid()}")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    try:
        child = subprocess.Popen(argv[2:])
    except OSError as exc:
        print(f"cannot start {argv[2]}: {exc}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            code = child.wait(POLL_SECONDS)
            break
        except subprocess.TimeoutExpired:
            pass
        try:
            with open(order) as f:
                wanted = int(f.read().strip())
        except (OSError, ValueError):
            continue
        child.kill()
        child.wait()
        return wanted
    if code < 0:  # killed by a signal: die of the same one, so the runner sees the same
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal that does not kill: the shell's convention
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
