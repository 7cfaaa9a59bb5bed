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
    from cluster_tool.parsers.normalise import Reading

# Every parser module; a new one goes here to be listed by `cluster-tool parse` (keep sorted).
MODULES = (
    "dcgmi",
    "host",
    "ibcounters",
    "iblinkinfo",
    "ibnetdiscover",
    "ibstat",
    "kernel_log",
    "link_events",
    "lspci",
    "mlxlink",
    "mounts",
    "nccl_tests",
    "nvidia_query",
    "nvidia_smi",
    "nvidia_topo",
    "nvlink",
    "nvlink_errors",
    "os_release",
)

__all__ = ["KINDS", "MODULES", "ParseError", "parser", "read", "to_jsonable"]


def read(kind: str, text: str) -> Reading:
    """A capture as operators make it, read by parser `kind` (see `base.read`): every host's
    records with the lines that could not be read, rather than one error for the file."""
    from cluster_tool.parsers import base

    kinds = __getattr__("KINDS")
    if kind not in kinds:
        raise KeyError(kind)
    return base.read(kind, text)


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
