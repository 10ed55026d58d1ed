"""The plugin author guide (docs/plugins.md) covers every hook, and every hook has a test.

For each hook of trainjobs/plugin/hookspecs.py the guide must have a heading with the hook and
its arguments, in the order the module defines (and the core runs) them, and a section saying
what the arguments are, what it returns and when it runs. The recorder of
tests/unit/plugin/test_plugins.py must implement every hook and its test must assert that each was
called. The guide must also name every export of `trainjobs.plugin`, both blocking variables,
the pytest plugin line, and have a changelog entry for the current `PLUGIN_API_VERSION`; its
Python examples must parse, and its relative links must lead somewhere.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import pytest

import trainjobs.plugin as plugin_api
from tests.unit.helpers import REPO
from trainjobs.plugin import hookspecs
from trainjobs.plugin.manager import DISABLE_AUTOLOAD_ENV, DISABLE_PLUGINS_ENV

from . import test_plugins

GUIDE = REPO / "docs" / "plugins.md"
HEADING = re.compile(r"^(#{2,4})\s+`(trainjobs_\w+)\(([^)]*)\)`\s*$", re.M)


def defined_hooks() -> list[str]:
    """Every hook, in the order hookspecs.py defines them (the documented run order)."""
    hooks = [(inspect.getsourcelines(func)[1], name)
             for name, func in inspect.getmembers(hookspecs, inspect.isfunction)
             if name.startswith("trainjobs_")]
    return [name for _, name in sorted(hooks)]


def arguments(hook: str) -> list[str]:
    return list(inspect.signature(getattr(hookspecs, hook)).parameters)


def guide() -> str:
    return GUIDE.read_text()


def sections() -> dict[str, tuple[list[str], str]]:
    """hook -> (the arguments in its heading, the text of its section)."""
    text = guide()
    found: dict[str, tuple[list[str], str]] = {}
    for match in HEADING.finditer(text):
        level = match.group(1)
        rest = text[match.end():]
        end = re.search(rf"^#{{1,{len(level)}}}\s", rest, re.M)
        body = rest[:end.start()] if end else rest
        args = [a.strip() for a in match.group(3).split(",") if a.strip()]
        assert match.group(2) not in found, f"{match.group(2)} has two headings"
        found[match.group(2)] = (args, body)
    return found


def test_there_are_hooks_to_document() -> None:
    assert len(defined_hooks()) >= 6


@pytest.mark.parametrize("hook", defined_hooks())
def test_every_hook_has_a_section_with_its_arguments(hook: str) -> None:
    documented = sections()
    assert hook in documented, (
        f"docs/plugins.md has no heading for {hook}: add `### `{hook}"
        f"({', '.join(arguments(hook))})`` with its arguments, return value and when it runs")
    args, body = documented[hook]
    assert args == arguments(hook), (
        f"docs/plugins.md documents {hook}({', '.join(args)}); hookspecs.py has "
        f"{hook}({', '.join(arguments(hook))})")
    for part in ("**Arguments**", "**Returns**", "**When**"):
        assert part in body, f"the section of {hook} in docs/plugins.md lacks {part}"
    for arg in arguments(hook):
        assert f"`{arg}`" in body, f"the section of {hook} does not describe `{arg}`"


def test_hooks_are_documented_in_the_order_they_run() -> None:
    documented = list(sections())
    assert documented == defined_hooks(), (
        "docs/plugins.md documents hooks that do not exist, or out of hookspecs.py's order")
    order = guide().split("## The hooks", 1)[1]
    positions = [order.index(f"`{hook}(") for hook in defined_hooks()]
    assert positions == sorted(positions), "the run-order list is out of hookspecs.py's order"


@pytest.mark.parametrize("hook", defined_hooks())
def test_every_hook_is_exercised_by_the_recorder_test(hook: str) -> None:
    """tests/unit/plugin/test_plugins.py's Recorder implements every hook, and its test asserts that
    the core called each one."""
    impl = getattr(test_plugins.Recorder, hook, None)
    assert impl is not None, \
        f"tests/unit/plugin/test_plugins.py's Recorder does not implement {hook}"
    assert getattr(impl, f"{hookspecs.PROJECT}_impl", None) is not None, f"{hook} not @hookimpl"
    assert list(inspect.signature(impl).parameters)[1:] == arguments(hook)
    assert hook in test_plugins.HOOKS
    source = inspect.getsource(test_plugins.test_every_hook_is_called_through_the_manager)
    assert "sorted(calls) == HOOKS" in source, "the recorder test no longer checks every hook"
    assert f'calls["{hook}"]' in source, f"the recorder test does not check how {hook} is called"


def test_the_guide_names_the_public_api_and_how_to_block_and_test_plugins() -> None:
    text = guide()
    for name in plugin_api.__all__:
        assert f"`{name}`" in text, f"docs/plugins.md does not mention trainjobs.plugin.{name}"
    for variable in (DISABLE_AUTOLOAD_ENV, DISABLE_PLUGINS_ENV):
        assert f"`{variable}" in text, f"docs/plugins.md does not explain {variable}"
    assert 'pytest_plugins = ["trainjobs.testing.pytest_plugin"]' in text
    assert "[project.entry-points.trainjobs]" in text
    assert "`FrameworkPlugin`" in text and "@hookimpl" in text


def test_the_changelog_has_the_current_version() -> None:
    changelog = guide().split("### Changelog", 1)[1]
    version = re.escape(plugin_api.PLUGIN_API_VERSION)
    assert re.search(rf"^\| {version} \|", changelog, re.M), (
        f"docs/plugins.md's changelog has no row for PLUGIN_API_VERSION "
        f"{plugin_api.PLUGIN_API_VERSION}")


def test_the_python_examples_parse() -> None:
    blocks = re.findall(r"^([ ]*)```python\n(.*?)^\1```", guide(), re.M | re.S)
    assert len(blocks) >= 4
    for _, code in blocks:
        ast.parse(textwrap.dedent(code))


def test_relative_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", guide()):
        assert (GUIDE.parent / target).exists(), f"docs/plugins.md links to missing {target}"
