"""The base of every user-facing model, apart so that the API's modules (models,
failure_policy) share it without importing one another."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["SpecModel"]


class SpecModel(BaseModel):
    """Base of every user-facing model: camelCase names, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def to_api(self) -> dict[str, Any]:
        """The object as the API writes it: camelCase, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
