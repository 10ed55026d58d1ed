"""The operator's controller config as plugins see it: the file's sections, each parsed once.

The core reads the file (and the command-line overrides plugins declare) once at start and
hands every hook the same `ControllerConfig`; a plugin reads its own section with
`config_section(config, KEY, parse)`, which calls `parse` once per config object and key, not on
every pod render. A plain mapping (a test, `trainjobs run`) works too, parsed on each call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TypeVar

__all__ = ["ControllerConfig", "config_section"]

T = TypeVar("T")


class ControllerConfig(Mapping[str, object]):
    """A read-only mapping of the controller config's sections that remembers each
    section's parsed form (per key and parser), so a plugin parses its section once."""

    __slots__ = ("_data", "_parsed")

    def __init__(self, data: Mapping[str, object] | None = None) -> None:
        self._data: Mapping[str, object] = MappingProxyType(dict(data or {}))
        self._parsed: dict[tuple[str, Callable[[object], object]], object] = {}

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"ControllerConfig({dict(self._data)!r})"

    def section(self, key: str, parse: Callable[[object], T]) -> T:
        """`parse(self.get(key))`, computed once per key and parser (its errors are not
        remembered: a bad section raises every time)."""
        slot = (key, parse)
        if slot not in self._parsed:
            self._parsed[slot] = parse(self._data.get(key))
        return self._parsed[slot]  # type: ignore[return-value]


def config_section(config: Mapping[str, object], key: str, parse: Callable[[object], T]) -> T:
    """The section `key` of `config` as `parse` makes it (None when absent): once per
    `ControllerConfig`, on every call for another mapping."""
    if isinstance(config, ControllerConfig):
        return config.section(key, parse)
    return parse(config.get(key))
