"""The cluster spec: models, built-in node profiles, and the located-error loader."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cluster_tool.spec.models import (
    API_VERSION,
    SUPERPOD_SPINES,
    Cluster,
    Fabric,
    Hca,
    Nic,
    Node,
    NodeGroup,
    NodeProfile,
    builtin_profile,
    expand_hostlist,
)
from cluster_tool.spec.profiles import BUILTIN_PROFILES

if TYPE_CHECKING:
    from cluster_tool.spec.checks import cross_check
    from cluster_tool.spec.loader import load_spec, load_spec_text, parse_yaml, spec_from_dict

# The loader (YAML) and the cross-checks load on first use: the node checks on every node
# (Slurm's HealthCheckProgram) need the models only.
_LAZY = {
    "cross_check": "checks",
    "load_spec": "loader",
    "load_spec_text": "loader",
    "parse_yaml": "loader",
    "spec_from_dict": "loader",
}

__all__ = [
    "API_VERSION",
    "BUILTIN_PROFILES",
    "SUPERPOD_SPINES",
    "Cluster",
    "Fabric",
    "Hca",
    "Nic",
    "Node",
    "NodeGroup",
    "NodeProfile",
    "builtin_profile",
    "cross_check",
    "expand_hostlist",
    "load_spec",
    "load_spec_text",
    "parse_yaml",
    "spec_from_dict",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
