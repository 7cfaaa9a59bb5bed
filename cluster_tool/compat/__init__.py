"""Which versions of the node stack work together: the compatibility matrix (`matrix.yml`,
data with a public source per rule). The spec's pins are held against it by
cluster_tool/spec/pins.py (spec check, the playbooks' preflight), the versions read back from the
nodes by cluster_tool/checks/versions.py.

docs/compat.md lists the rules and says how to add a release.
"""

from __future__ import annotations

from typing import Any

# Loaded on first use: importing the package does not load the matrix's YAML.
_FROM = {
    "MATRIX_FILE": "matrix",
    "EqualRule": "matrix",
    "ExcludesRule": "matrix",
    "Matrix": "matrix",
    "MatrixError": "matrix",
    "RangeRule": "matrix",
    "RequiresRule": "matrix",
    "Violation": "matrix",
    "evaluate": "matrix",
    "load_matrix": "matrix",
    "matches": "matrix",
    "numbers": "matrix",
    "parse_matrix": "matrix",
}


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)


__all__ = [
    "MATRIX_FILE",
    "EqualRule",
    "ExcludesRule",
    "Matrix",
    "MatrixError",
    "RangeRule",
    "RequiresRule",
    "Violation",
    "evaluate",
    "load_matrix",
    "matches",
    "numbers",
    "parse_matrix",
]
