"""The gate's tunables have their defaults in one place, the spec's `thresholds.nccl_gate`
(`cluster_tool.spec.thresholds.NcclGateThresholds`); the gate takes them from there
(`GateOptions.from_spec`, or `GateOptions()` for the spec's defaults). A default restated
downstream (`max_fail_share: float = 0.25` in the localizer, the simulator, the drain plan...)
is a second place to change, and the day one of them is not, `gate` and `gate simulate` judge
by different rules (issue 37).

Read from the sources, as test_layering reads the imports: every parameter default, dataclass
field default and module constant in the product whose name is one of a tunable's names and
whose value is a number the spec gives as that tunable's default.
"""

from __future__ import annotations

import ast
from pathlib import Path

from cluster_tool.spec.thresholds import NcclGateThresholds

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "cluster_tool"
# The one place the defaults are written, and the lab (not the product).
EXEMPT = (PACKAGE / "spec", PACKAGE / "lab")

# The spec's field -> the names the gate's code gives it.
NAMES = {
    "max_failing_share": ("max_fail_share", "max_failing_share"),
    "straggler_zscore": ("straggler_z", "z_cut"),
    "screens": ("screens",),
    "watchdog_s": ("watchdog_s", "watchdog"),
    "busbw_fraction": ("min_fraction", "busbw_fraction"),
}


def _number(node: ast.expr | None) -> float | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    return None


def _defaults(tree: ast.AST) -> list[tuple[str, float, int]]:
    """(name, literal default, line) for every parameter, annotated field and constant."""
    found: list[tuple[str, float, int]] = []
    for node in ast.walk(tree):
        named: list[tuple[str, ast.expr | None]] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = [*a.posonlyargs, *a.args][
                len(a.posonlyargs) + len(a.args) - len(a.defaults) :
            ]
            named += [(arg.arg, d) for arg, d in zip(positional, a.defaults, strict=True)]
            named += [(arg.arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            named.append((node.target.id, node.value))
        elif isinstance(node, ast.Assign):
            named += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        for name, default in named:
            if (value := _number(default)) is not None:
                assert default is not None
                found.append((name, value, default.lineno))
    return found


def restated() -> list[str]:
    spec = NcclGateThresholds()
    wanted = {
        alias: (field, float(getattr(spec, field)))
        for field, aliases in NAMES.items()
        for alias in aliases
    }
    out: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path.is_relative_to(e) for e in EXEMPT):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, value, line in _defaults(tree):
            for alias, (field, default) in wanted.items():
                if alias in name.lower() and value == default:
                    out.append(
                        f"{path.relative_to(ROOT)}:{line}: {name} = {value:g} restates "
                        f"thresholds.nccl_gate.{field}"
                    )
                    break
    return out


def test_the_gates_defaults_are_written_once_in_the_spec() -> None:
    assert restated() == []


def test_the_default_options_are_the_specs() -> None:
    from cluster_tool.gate.ladder import GateOptions

    spec = NcclGateThresholds.model_validate({"max_failing_share": 0.5, "screens": 3})
    options = GateOptions.from_spec(spec)
    assert (options.max_fail_share, options.screens, options.straggler_z) == (0.5, 3, 3.5)
    assert GateOptions() == GateOptions.from_spec(NcclGateThresholds())


def test_the_shared_defaults_cannot_be_changed_under_their_readers() -> None:
    import pydantic
    import pytest

    from cluster_tool.gate.thresholds import SPEC_DEFAULTS

    with pytest.raises(pydantic.ValidationError, match="frozen"):
        SPEC_DEFAULTS.busbw_fraction = 0.1
    assert SPEC_DEFAULTS.busbw_fraction == NcclGateThresholds.model_validate({}).busbw_fraction
