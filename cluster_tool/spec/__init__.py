"""The cluster spec: models, built-in node profiles, and the located-error loader."""

from __future__ import annotations

from cluster_tool.spec.checks import cross_check
from cluster_tool.spec.loader import load_spec, load_spec_text, parse_yaml, spec_from_dict
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
