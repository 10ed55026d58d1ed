"""The flags of the cluster commands (submit, status, list, wait, logs, checkpoint, delete),
outside the trainjobs.client package, whose import loads aiohttp and the transport.

Why apart from commands.py: building the `trainjobs` parser must stay cheap (`trainjobs render`
runs in CI loops); the client, the transport and aiohttp are imported only when a cluster
command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["add_cluster_commands"]


def _lazy(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from trainjobs.client.commands import run_command

        return run_command(name, args)
    return run


def _seconds(text: str) -> float:
    """--wait's SECONDS: a positive number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig "
                                                  "context's, else default)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                                             "~/.kube/config, else in-cluster)")


def add_cluster_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds submit, status, list, wait, logs, checkpoint and delete to the `trainjobs` parser."""
    submit = sub.add_parser("submit", help="create a job on the cluster (--wait: follow it)")
    submit.add_argument("job", help="job YAML file")
    submit.add_argument("--wait", action="store_true",
                        help="follow the job until it finishes; exit 0 when it Succeeded")
    submit.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="with --wait: give up after this long (exit 3)")
    submit.add_argument("--no-color", action="store_true", help="plain output")
    _common(submit)
    submit.set_defaults(func=_lazy("submit"))

    status = sub.add_parser("status", help="a job's state, replicas, pods and events "
                                           "(no JOB: every job)")
    status.add_argument("job", nargs="?", help="JOB or KIND/JOB")
    _common(status)
    status.set_defaults(func=_lazy("status"))

    lst = sub.add_parser("list", help="jobs of every installed kind")
    lst.add_argument("-l", "--selector", default="", help="label selector, e.g. team=vision")
    lst.add_argument("-A", "--all-namespaces", action="store_true")
    lst.add_argument("--kind", help="only this kind")
    _common(lst)
    lst.set_defaults(func=_lazy("list"))

    wait = sub.add_parser("wait", help="wait for a job's condition")
    wait.add_argument("job", help="JOB or KIND/JOB")
    wait.add_argument("--for", dest="until", default="Succeeded", metavar="CONDITION",
                      help="Created, Running, Restarting, Succeeded (default), Failed, "
                           "Suspended, Queued")
    wait.add_argument("--timeout", type=float, metavar="SECONDS", help="exit 3 after this long")
    _common(wait)
    wait.set_defaults(func=_lazy("wait"))

    logs = sub.add_parser("logs", help="the job's pod logs (every replica, or one)")
    logs.add_argument("job", help="JOB or KIND/JOB")
    logs.add_argument("--replica", metavar="TYPE-INDEX", help="one replica, e.g. Worker-1")
    logs.add_argument("-f", "--follow", action="store_true", help="keep streaming")
    logs.add_argument("-c", "--container", help="container (default: the framework's)")
    _common(logs)
    logs.set_defaults(func=_lazy("logs"))

    checkpoint = sub.add_parser(
        "checkpoint", help="ask a running job to save a checkpoint now (it keeps running)",
        description="Asks the job's checkpointing replica to save a checkpoint now, without "
                    "stopping the job (the job must set spec.runPolicy."
                    "checkpointTimeoutSeconds). Prints one line: asked, saved at step S to "
                    "URI, or timed out.")
    checkpoint.add_argument("job", help="JOB or KIND/JOB")
    checkpoint.add_argument("--kind", help="the job's kind (as KIND/JOB)")
    checkpoint.add_argument(
        "--wait", nargs="?", const=True, default=False, type=_seconds, metavar="SECONDS",
        help="(after JOB) until the job answers, at most SECONDS (default: its "
             "checkpointTimeoutSeconds plus a minute); exit 3 when it did not save in time")
    _common(checkpoint)
    checkpoint.set_defaults(func=_lazy("checkpoint"))

    delete = sub.add_parser("delete", help="delete a job (its pods and Services go with it)")
    delete.add_argument("job", help="JOB or KIND/JOB")
    delete.add_argument("--wait", action="store_true", help="until it is gone")
    _common(delete)
    delete.set_defaults(func=_lazy("delete"))
