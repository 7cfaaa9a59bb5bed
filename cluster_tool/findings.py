"""Findings and reports: the one JSON shape every check and the gate hand back
(docs/architecture.md, "Findings")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

Severity = Literal["error", "warning", "info"]


class Finding(BaseModel):
    """One thing a check found: which check, how bad, where, and expected against observed."""

    model_config = ConfigDict(frozen=True)

    check: str
    severity: Severity = "error"
    node: str | None = None
    component: str | None = None
    expected: str | None = None
    observed: str | None = None
    message: str
    # fabric.swapped: the two HCAs exchanged, as data (`component` says the same as text).
    swapped: tuple[str, str] | None = None

    @model_serializer(mode="wrap")
    def _swap_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only a swap carries `swapped`: every other finding keeps the contract's seven keys.
        data: dict[str, Any] = handler(self)
        if data.get("swapped") is None:
            data.pop("swapped", None)
        return data

    @property
    def fails(self) -> bool:
        """Only errors fail a report; warnings and info are there to be read."""
        return self.severity == "error"


class Report(BaseModel):
    """A run's verdict: `fail` as soon as one finding is an error; summary holds the counts."""

    status: Literal["pass", "fail"]
    findings: list[Finding] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_findings(
        cls, findings: Iterable[Finding], summary: dict[str, Any] | None = None
    ) -> Report:
        """Build a report whose status and severity counts follow from its findings."""
        items = list(findings)
        counts = Counter(f.severity for f in items)
        merged: dict[str, Any] = {
            "errors": counts.get("error", 0),
            "warnings": counts.get("warning", 0),
            "info": counts.get("info", 0),
        }
        merged.update(summary or {})
        status: Literal["pass", "fail"] = "fail" if any(f.fails for f in items) else "pass"
        return cls(status=status, findings=items, summary=merged)

    @property
    def exit_code(self) -> int:
        """The CLI contract: 0 pass, 1 checks failed."""
        return 0 if self.status == "pass" else 1

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON: status, findings (every key present, null when unknown), summary."""
        return {
            "status": self.status,
            "findings": [f.model_dump() for f in self.findings],
            "summary": self.summary,
        }
