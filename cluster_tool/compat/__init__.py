"""Which versions of the node stack work together: the compatibility matrix (`matrix.yml`,
data with a public source per rule) and the checks that hold a spec's pins against it.

docs/compat.md lists the rules and says how to add a release.
"""

from __future__ import annotations

from cluster_tool.compat.matrix import (
    MATRIX_FILE,
    EqualRule,
    ExcludesRule,
    Matrix,
    MatrixError,
    RangeRule,
    RequiresRule,
    Violation,
    evaluate,
    load_matrix,
    matches,
    numbers,
    parse_matrix,
)
from cluster_tool.compat.spec import Pin, spec_pins, spec_problems

__all__ = [
    "MATRIX_FILE",
    "EqualRule",
    "ExcludesRule",
    "Matrix",
    "MatrixError",
    "Pin",
    "RangeRule",
    "RequiresRule",
    "Violation",
    "evaluate",
    "load_matrix",
    "matches",
    "numbers",
    "parse_matrix",
    "spec_pins",
    "spec_problems",
]
