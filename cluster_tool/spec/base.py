"""The base of every spec model: unknown keys are an error, never silently ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
