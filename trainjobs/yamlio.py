"""YAML output that people read: block style, no anchors, keys in the order we built them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["dump_all"]


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_all(docs: Iterable[Any]) -> str:
    return yaml.dump_all(list(docs), Dumper=_PlainDumper, sort_keys=False, width=100)
