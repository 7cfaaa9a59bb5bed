"""Parsers: pure functions from one tool's text output to typed records.

`KINDS` here is every parser kind, for `cluster-tool parse`: reading it loads every parser module
(each registers its kinds as it imports), while importing one parser loads that one alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cluster_tool.parsers.base import ParseError, parser, to_jsonable

if TYPE_CHECKING:
    from cluster_tool.parsers.base import KINDS

# Every parser module; a new one goes here to be listed by `cluster-tool parse` (keep sorted).
MODULES = (
    "dcgmi",
    "ibcounters",
    "iblinkinfo",
    "ibnetdiscover",
    "ibstat",
    "kernel_log",
    "nccl_tests",
    "nvidia_query",
    "nvidia_smi",
    "nvidia_topo",
    "nvlink",
)

__all__ = ["KINDS", "MODULES", "ParseError", "parser", "to_jsonable"]


def __getattr__(name: str) -> Any:
    # KINDS is complete only once every parser has registered; the node checks (Slurm's
    # HealthCheckProgram, every interval) import their five parsers and never read it.
    if name != "KINDS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    from cluster_tool.parsers.base import KINDS

    globals()["KINDS"] = KINDS
    return KINDS
