"""`trainjobs run`'s signals: Ctrl-C/SIGTERM stop every replica, first asking for a
checkpoint when the job wants one (issue 38), and the exit code.

Why apart from the runner: what an interruption does — ask the checkpointing replica, wait
within `runPolicy.checkpointTimeoutSeconds`, a second Ctrl-C cutting the wait short — is one
concern, with its own console lines, and runner.py stays the reconcile loop.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainjobs.local.runner import LocalRun

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_SUCCEEDED", "supervise"]

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


async def supervise(run: LocalRun, started: float) -> int:
    """Run `run` to its end or to an interruption; the process's exit code."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    interrupted: list[str] = []
    waiting: list[asyncio.Task[None]] = []

    async def checkpoint_then_stop(replica: str, seconds: int) -> None:
        try:
            await asyncio.wait_for(run.checkpoint_saved.wait(), seconds)
        except TimeoutError:
            run.receiver.desk.cancel()
            run.console.note(f"no checkpoint was saved within {seconds}s: stopping every "
                             f"replica")
        else:
            run.console.note("stopping every replica")
        task.cancel()

    def on_signal(name: str) -> None:
        if interrupted:
            if waiting and not waiting[0].done():  # a second Ctrl-C: no more waiting
                waiting[0].cancel()
                run.receiver.desk.cancel()
                run.console.note(f"{name} again: stopping every replica now")
                task.cancel()
            return
        interrupted.append(name)
        target = run.checkpoint_target()
        if target is None:
            run.console.note(f"{name}: stopping every replica")
            task.cancel()
            return
        replica, seconds = target
        run.receiver.desk.request(replica, run.job.status.attempt)
        run.console.note(f"{name}: asking {replica} for a checkpoint; stopping every replica "
                         f"once it is saved, or in {seconds}s (Ctrl-C again: stop now)")
        waiting.append(loop.create_task(checkpoint_then_stop(replica, seconds)))

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        job = await run.run()
    except asyncio.CancelledError:
        await run.stop_all()
        stopped = f"stopped by {interrupted[0] if interrupted else 'cancel'}"
        if run.saved is not None:
            stopped += f", after a checkpoint at step {run.saved.step}"
        run.console.summary(run.job.name, "Interrupted", time.monotonic() - started,
                            stopped, run.summaries(), str(run.log_dir), run.board.view())
        if run.saved is not None:
            run.console.note(f"resume with: {run.resume_hint}")
        return EXIT_INTERRUPTED
    finally:
        for waiter in waiting:
            waiter.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    state = job.status.state
    message = next((c.message for c in job.status.conditions if c.type == state), "")
    run.console.summary(job.name, state, time.monotonic() - started, message, run.summaries(),
                        str(run.log_dir), run.board.view())
    return EXIT_SUCCEEDED if state == "Succeeded" else EXIT_FAILED
