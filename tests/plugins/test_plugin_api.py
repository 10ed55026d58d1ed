"""The public plugin API stays small, typed and versioned, and the example plugin uses nothing else.

- Every import in examples/plugins/**/*.py (parsed, not grepped) of a `trainjobs` module is
  `trainjobs.plugin` — or, in tests and conftest files, `trainjobs.testing`.
- `trainjobs.plugin.__all__`, the shape of everything it exports and every hook's signature are
  pinned in plugin_api.snapshot.json together with `PLUGIN_API_VERSION`: changing the surface
  fails here until the snapshot is regenerated, and regenerating it refuses to record a new
  surface under the old version. So a change of the plugin API is always a visible decision:
  a new version, a new snapshot, a line in docs/plugins.md's changelog.
- `py.typed` ships with trainjobs, so plugins type-check against it (the third-party plugin
  test runs mypy --strict on the example against an installed trainjobs).

Regenerate the snapshot after a deliberate change (and a version bump):
`TRAINJOBS_UPDATE_API_SNAPSHOT=1 pytest tests/plugins/test_plugin_api.py`.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import enum
import inspect
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pydantic
import pytest

import trainjobs.plugin as plugin_api
from trainjobs.plugin import hookspecs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PLUGINS = REPO / "examples" / "plugins"
SNAPSHOT = Path(__file__).with_name("plugin_api.snapshot.json")
UPDATE_ENV = "TRAINJOBS_UPDATE_API_SNAPSHOT"
PUBLIC = "trainjobs.plugin"
PUBLIC_IN_TESTS = ("trainjobs.plugin", "trainjobs.testing", "trainjobs.testing.pytest_plugin")


# The example imports nothing private --------------------------------------------------------


def _is_test_file(path: Path) -> bool:
    return "tests" in path.parts or path.name == "conftest.py" or path.name.startswith("test_")


def trainjobs_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a `trainjobs` module, and of every module named in a
    `pytest_plugins` list."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "trainjobs":  # `from trainjobs import plugin` imports a module
                found += [(node.lineno, f"trainjobs.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets):
            found += [(node.lineno, c.value) for c in ast.walk(node.value)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return [(line, m) for line, m in found if m == "trainjobs" or m.startswith("trainjobs.")]


def example_sources() -> list[Path]:
    return sorted(p for p in EXAMPLE_PLUGINS.rglob("*.py")
                  if not {"build", ".venv", "__pycache__"} & set(p.parts))


def test_example_plugins_import_only_the_public_api() -> None:
    sources = example_sources()
    assert any(p.name == "__init__.py" and "trainjobs_pytorch" in p.parts for p in sources)
    private: list[str] = []
    used: set[str] = set()
    for path in sources:
        allowed = PUBLIC_IN_TESTS if _is_test_file(path) else (PUBLIC,)
        for line, module in trainjobs_imports(path):
            used.add(module)
            if module not in allowed:
                private.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    assert not private, ("the example plugin may import only trainjobs.plugin (and "
                         "trainjobs.testing in tests):\n" + "\n".join(private))
    assert PUBLIC in used and "trainjobs.testing" in used  # the check is not vacuous


@pytest.mark.parametrize("source", [
    "import trainjobs\n",
    "import trainjobs.core.render\n",
    "from trainjobs.plugin.manager import load_plugins\n",
    "from trainjobs.api.models import Job\n",
    "from trainjobs import errors\n",
    "import trainjobs.plugin.types as t\n",
])
def test_the_import_check_catches_private_imports(tmp_path: Path, source: str) -> None:
    path = tmp_path / "plugin.py"
    path.write_text(source + "from trainjobs.plugin import Framework\nimport json\n")
    modules = [module for _, module in trainjobs_imports(path)]
    assert modules[-1] == PUBLIC and modules[0] != PUBLIC, modules


def test_the_import_check_reads_pytest_plugins(tmp_path: Path) -> None:
    path = tmp_path / "conftest.py"
    path.write_text('pytest_plugins = ["trainjobs.testing.pytest_plugin", "trainjobs.core.x"]\n'
                    "from trainjobs import plugin\n")
    assert [m for _, m in trainjobs_imports(path)] == [
        "trainjobs.testing.pytest_plugin", "trainjobs.core.x", "trainjobs.plugin"]


# The surface, pinned ------------------------------------------------------------------------

_DOTTED = re.compile(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)")


def _type(annotation: Any) -> str:
    """An annotation as text, without module paths (moving a class between private modules
    is not an API change) or quotes."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return _DOTTED.sub(r"\1", text.replace("'", "").replace('"', ""))


def _default(value: Any) -> str:
    if inspect.isclass(value):
        return value.__name__
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def _signature(func: Any) -> str:
    sig = inspect.signature(func)
    params: list[str] = []
    star = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = prefix + p.name
        if p.annotation is not p.empty:
            text += f": {_type(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}"
        params.append(text)
    returns = "" if sig.return_annotation is sig.empty else f" -> {_type(sig.return_annotation)}"
    return f"({', '.join(params)}){returns}"


def _members(cls: type) -> dict[str, str]:
    """Public methods and properties a class defines itself (inherited ones are pinned where
    they are defined)."""
    out: dict[str, str] = {}
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, property) and value.fget is not None:
            out[name] = "property -> " + _type(inspect.signature(value.fget).return_annotation)
        elif isinstance(value, (staticmethod, classmethod)):
            out[name] = f"{type(value).__name__} {_signature(value.__func__)}"
        elif inspect.isfunction(value):
            out[name] = _signature(value)
    return out


def describe(obj: Any) -> dict[str, Any]:
    """What a plugin can rely on about one exported name."""
    if isinstance(obj, str):
        return {"kind": "constant"}
    if not inspect.isclass(obj):
        return {"kind": type(obj).__name__, "project": getattr(obj, "project_name", None)}
    bases = [b.__name__ for b in obj.__bases__]
    if issubclass(obj, enum.Enum):
        return {"kind": "enum", "bases": bases, "members": {m.name: m.value for m in obj}}
    if dataclasses.is_dataclass(obj):
        params = obj.__dataclass_params__  # type: ignore[attr-defined]
        fields = {}
        for f in dataclasses.fields(obj):
            default = ("required" if f.default is dataclasses.MISSING and
                       f.default_factory is dataclasses.MISSING else
                       "factory" if f.default is dataclasses.MISSING else _default(f.default))
            fields[f.name] = f"{_type(f.type)} = {default}"
        members = {k: v for k, v in _members(obj).items() if k != "__init__"}  # = fields
        return {"kind": "dataclass", "frozen": params.frozen, "order": params.order,
                "fields": fields, "members": members}
    if issubclass(obj, pydantic.BaseModel):
        fields = {}
        for name, info in obj.model_fields.items():
            default = ("required" if info.is_required() else
                       "factory" if info.default_factory is not None else _default(info.default))
            fields[name] = f"{_type(info.annotation)} alias={info.alias} = {default}"
        config = {k: obj.model_config.get(k) for k in ("extra", "frozen", "populate_by_name")}
        return {"kind": "model", "bases": bases, "config": config, "fields": fields,
                "members": _members(obj)}
    if issubclass(obj, BaseException):
        return {"kind": "exception", "bases": bases, "members": _members(obj)}
    annotations = {k: _type(v) for k, v in inspect.get_annotations(obj).items()}
    return {"kind": "class", "bases": bases, "attributes": annotations,
            "members": _members(obj)}


def hooks() -> dict[str, str]:
    """Every hook: its signature and whether the first answer wins."""
    out = {}
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("trainjobs_"):
            options = getattr(func, f"{hookspecs.PROJECT}_spec", {})  # set by HookspecMarker
            first = bool(options.get("firstresult"))
            out[name] = _signature(func) + (" [firstresult]" if first else "")
    return out


def surface() -> dict[str, Any]:
    return {
        "all": sorted(plugin_api.__all__),
        "exports": {name: describe(getattr(plugin_api, name)) for name in
                    sorted(plugin_api.__all__)},
        "hooks": hooks(),
    }


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    def dump(d: dict[str, Any]) -> list[str]:
        return json.dumps(d, indent=2, sort_keys=True).splitlines()

    return "\n".join(difflib.unified_diff(dump(old), dump(new), "snapshot", "now", lineterm=""))


def test_the_plugin_api_surface_matches_its_snapshot() -> None:
    pinned = json.loads(SNAPSHOT.read_text())
    current = surface()
    version = plugin_api.PLUGIN_API_VERSION
    if os.environ.get(UPDATE_ENV) == "1":
        if current != pinned["surface"] and version == pinned["version"]:
            pytest.fail(f"the plugin API changed but PLUGIN_API_VERSION is still {version}: "
                        "bump it (docs/plugins.md, Versioning) before updating the snapshot\n"
                        + _diff(pinned["surface"], current))
        SNAPSHOT.write_text(json.dumps({"version": version, "surface": current}, indent=2,
                                       sort_keys=True) + "\n")
        return
    assert current == pinned["surface"], (
        "the public plugin API (trainjobs.plugin) changed. If that is deliberate: bump "
        "PLUGIN_API_VERSION (minor for additions, major for anything that can break a plugin), "
        "add it to docs/plugins.md's changelog, and regenerate the snapshot with "
        f"{UPDATE_ENV}=1. The change:\n" + _diff(pinned["surface"], current))
    assert version == pinned["version"], (
        f"PLUGIN_API_VERSION is {version} but the snapshot was taken at {pinned['version']}: "
        f"regenerate it with {UPDATE_ENV}=1")


def test_plugin_api_version_is_major_minor() -> None:
    assert re.fullmatch(r"\d+\.\d+", plugin_api.PLUGIN_API_VERSION)
    assert "PLUGIN_API_VERSION" in plugin_api.__all__


def test_every_export_exists_and_is_documented() -> None:
    for name in plugin_api.__all__:
        obj = getattr(plugin_api, name)
        if inspect.isclass(obj):
            assert inspect.getdoc(obj), f"trainjobs.plugin.{name} needs a docstring"


# Typed ---------------------------------------------------------------------------------------


def test_py_typed_ships() -> None:
    assert (REPO / "trainjobs" / "py.typed").is_file()
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]
    assert any("py.typed" in files for files in package_data.values())
    plugin = tomllib.loads((EXAMPLE_PLUGINS / "trainjobs-pytorch" / "pyproject.toml").read_text())
    assert "py.typed" in plugin["tool"]["setuptools"]["package-data"]["trainjobs_pytorch"]
    assert (EXAMPLE_PLUGINS / "trainjobs-pytorch" / "src" / "trainjobs_pytorch" /
            "py.typed").is_file()
