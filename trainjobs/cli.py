"""The `trainjobs` command: operator, run, render, convert, crds, plugins.

Why argparse: the standard library is enough for five subcommands, and it keeps start-up fast
(`trainjobs render` runs in CI loops). Every user mistake ends as one clear message on stderr
and a non-zero exit, never a traceback: exit 2 for an invalid job or usage, 1 for other errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainjobs.errors import (
    InjectInvalid,
    NoCheckpoint,
    PluginRefused,
    ProgramMissing,
    SpecInvalid,
    TrainjobsError,
)
from trainjobs.yamlio import dump_all, ignored_note

__all__ = ["main"]

EXIT_INVALID = 2
EXIT_PROGRAM_MISSING = 3  # `trainjobs run`: a program it needs is not installed


def _cmd_render(args: argparse.Namespace) -> int:
    from trainjobs.core.render import render_job
    from trainjobs.core.validation import load_job_file
    from trainjobs.plugin.manager import load_plugins

    plugins = load_plugins()
    docs = []
    loaded = load_job_file(Path(args.job), plugins)
    for job in loaded.jobs:
        framework = plugins.framework_for(job.kind)
        assert framework is not None
        docs += render_job(job, framework, plugins).manifests()
    if loaded.ignored:
        print(ignored_note(loaded.ignored), file=sys.stderr)
    sys.stdout.write(dump_all(docs))
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from trainjobs.convert import convert_documents
    from trainjobs.errors import SpecError
    from trainjobs.yamlio import read_documents

    docs: list[object] = []
    errors: list[SpecInvalid] = []
    for name in args.files:
        try:
            result = convert_documents(read_documents(Path(name)), source=name)
        except SpecInvalid as exc:
            errors.append(exc)
            continue
        docs += result.documents
        for ref, note in result.notes:
            print(f"{name}: {ref}: {note}", file=sys.stderr)
        if result.passed:
            print(f"{name}: unchanged: {', '.join(result.passed)}", file=sys.stderr)
    if errors:
        # Every file's refusals, not only the first file's: fix them all in one pass.
        problems = [SpecError(f"{e.source}: {p.path}" if p.path else e.source, p.message)
                    for e in errors for p in e.errors]
        raise SpecInvalid(problems, "cannot convert")
    sys.stdout.write(dump_all(docs))
    return 0


def _cmd_crds(args: argparse.Namespace) -> int:
    from trainjobs.crdgen import render_crd_yaml, write_crds
    from trainjobs.plugin.manager import load_plugins

    plugins = load_plugins()
    if args.output:
        for path in write_crds(plugins, Path(args.output)):
            print(f"wrote {path}")
        return 0
    sys.stdout.write("---\n".join(render_crd_yaml(f) for f in plugins.frameworks.values()))
    return 0


def _cmd_plugins(args: argparse.Namespace) -> int:
    from trainjobs.plugin.manager import load_plugins

    plugins = load_plugins()
    print(f"{'PLUGIN':<15} {'PACKAGE':<22} {'VERSION':<9} {'KINDS':<12} MODULE")
    for p in plugins.plugins:
        kinds = ",".join(p.kinds) or "-"
        print(f"{p.name:<15} {p.package:<22} {p.version:<9} {kinds:<12} {p.module}")
    return 0


def _cmd_operator(args: argparse.Namespace) -> int:
    from trainjobs.operator.main import run_operator

    return run_operator(args)


def _cmd_run(args: argparse.Namespace) -> int:
    from trainjobs.local.runner import run_file

    return run_file(Path(args.job), args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainjobs",
        description="Run distributed MXNet, TensorFlow and Caffe2 training jobs on Kubernetes "
                    "or on this machine.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = sub.add_parser("render", help="print the pods and Services a job would get")
    render.add_argument("job", help="job YAML file")
    render.set_defaults(func=_cmd_render)

    convert = sub.add_parser(
        "convert", help="rewrite Kubeflow / old operator jobs (TFJob, MXJob, Caffe2Job) as "
                        "trainjobs jobs",
        description="Prints every document of FILE... as YAML: Kubeflow and old-operator "
                    "training jobs rewritten as trainjobs jobs, other objects unchanged. What "
                    "changed and what has no equivalent goes to stderr; a field that cannot "
                    "be expressed refuses the conversion (exit 2) naming its path.")
    convert.add_argument("files", nargs="+", metavar="FILE", help="YAML file(s)")
    convert.set_defaults(func=_cmd_convert)

    crds = sub.add_parser("crds", help="CRDs for every installed kind")
    crds.add_argument("-o", "--output", metavar="DIR", help="write one file per kind into DIR")
    crds.set_defaults(func=_cmd_crds)

    plugins = sub.add_parser("plugins", help="list installed plugins and their packages")
    plugins.set_defaults(func=_cmd_plugins)

    from trainjobs.local.options import add_run_arguments
    from trainjobs.operator.options import add_operator_arguments

    op = sub.add_parser("operator", help="run the Kubernetes controller")
    add_operator_arguments(op)
    op.set_defaults(func=_cmd_operator)

    run = sub.add_parser("run", help="run a job on this machine, each replica a process")
    add_run_arguments(run)
    run.set_defaults(func=_cmd_run)

    from trainjobs.client_options import add_cluster_commands

    add_cluster_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except SpecInvalid as exc:
        print(f"error: {exc.summary()}", file=sys.stderr)
        return EXIT_INVALID
    except PluginRefused as exc:  # an installed plugin cannot work: nothing ran
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ProgramMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROGRAM_MISSING
    except InjectInvalid as exc:  # `run --inject` it cannot do: nothing ran
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except NoCheckpoint as exc:  # `run --resume` with nothing to resume from: nothing ran
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except TrainjobsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
