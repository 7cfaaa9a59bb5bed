"""Every finding id the code can emit is in the registry (cluster_tool/registry.py), every
registered id is emitted somewhere, and docs/findings.md has exactly one row per registered id,
with the registry's severities.

The emitted ids are read from the sources, not imported, so an id nobody registered is caught
before any run emits it: a finding id is
- any string bound to a parameter or variable named `check` (`Finding(check=...)`,
  `_f("gpu.ecc", ...)`, `self.fail(..., "nccl.wrong")`, `check, why = "fabric.wrong-su", ...`),
  through `x if c else y` and `TABLE.get(key, default)` too; an f-string such as
  `f"reimage.{step}"` becomes the pattern `reimage.<step>`, registered as written;
- the values of a dict bound to a name ending in CHECKS (`STEP_CHECKS`);
- any other string literal that looks like an id of a health/fabric family
  (`gpu.driver` in a probe table, `nccl.wrong` handed to a helper, `nccl.pair` as a default,
  `f"os.{self.name}"` as a fallback), except the few literals below that are something else.
The registry itself is not scanned: it would find every id it holds.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from cluster_tool.registry import CHECKS, FABRIC_CHECKS, NEEDS, NODE_CHECKS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "cluster_tool"
REGISTRY = SOURCES / "registry.py"
DOC = ROOT / "docs" / "findings.md"

FAMILIES = ("fabric", "gpu", "ib", "gdr", "nccl", "slurm", "os")
FAMILY_ID = re.compile(rf"^({'|'.join(FAMILIES)})\.[a-z0-9-]+$")
ANY_ID = re.compile(r"^[a-z]+\.[a-z0-9<>_-]+$")

# Literals that look like finding ids and are not, with where they come from.
NOT_FINDING_IDS: dict[str, str] = {
    "nccl.conf": "the file name of the rendered NCCL configuration (render guards, render -o)",
}

# A row of a table in docs/findings.md whose first cell is one backticked id, then its severities.
DOC_ROW = re.compile(r"^\|\s*`([a-z]+\.[a-z0-9<>_-]+)`\s*\|([^|]*)\|", re.MULTILINE)


def _id_values(node: ast.expr) -> list[str]:
    """The id(s) an expression bound to `check` can hold; [] for a variable."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _id_values(node.body) + _id_values(node.orelse)
    if isinstance(node, ast.Call) and _called_name(node) == "get" and len(node.args) == 2:
        return _id_values(node.args[1])  # STEP_CHECKS.get(step, f"reimage.{step}")
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                # f"os.{self.name}" is the pattern os.<name>
                named = value.value
                word = named.attr if isinstance(named, ast.Attribute) else ast.unparse(named)
                parts.append(f"<{word}>")
        return ["".join(parts)]
    return []


def _assigned_to_check(target: ast.expr, value: ast.expr) -> list[str]:
    """`check = ...` and `check, why = ..., ...`: the id(s) the name `check` receives."""
    if isinstance(target, ast.Name) and target.id == "check":
        return _id_values(value)
    if (
        isinstance(target, ast.Tuple)
        and isinstance(value, ast.Tuple)
        and len(target.elts) == len(value.elts)
    ):
        pairs = zip(target.elts, value.elts, strict=True)
        return [v for t, e in pairs for v in _assigned_to_check(t, e)]
    return []


def _family_pattern(node: ast.JoinedStr) -> bool:
    """`f"os.{probe}"`: a family's prefix, then one formatted value."""
    parts = node.values
    return (
        len(parts) == 2
        and isinstance(parts[0], ast.Constant)
        and parts[0].value in {f"{family}." for family in FAMILIES}
        and isinstance(parts[1], ast.FormattedValue)
    )


def _check_positions(tree: ast.Module) -> dict[str, int]:
    """Functions of a module with a positional parameter named `check`: name -> its index as
    a caller counts it (`self` dropped for methods)."""
    positions: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        names = [a.arg for a in node.args.posonlyargs + node.args.args]
        if "check" not in names:
            continue
        index = names.index("check")
        if names and names[0] in ("self", "cls"):
            index -= 1
        positions[node.name] = index
    return positions


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


@functools.cache
def emitted_ids() -> dict[str, set[str]]:
    """Every finding id the code can emit -> the source files it appears in."""
    found: dict[str, set[str]] = {}

    def add(value: str, path: Path) -> None:
        if ANY_ID.match(value) and value not in NOT_FINDING_IDS:
            found.setdefault(value, set()).add(str(path.relative_to(ROOT)))

    for path in sorted(SOURCES.rglob("*.py")):
        if path == REGISTRY:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        positions = _check_positions(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "check":
                        for value in _id_values(kw.value):
                            add(value, path)
                index = positions.get(_called_name(node) or "")
                if index is not None and 0 <= index < len(node.args):
                    for value in _id_values(node.args[index]):
                        add(value, path)
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for value in _assigned_to_check(target, node.value):
                        add(value, path)
                    # A table of ids: `STEP_CHECKS = {"wait-ssh": "reimage.no-ssh", ...}`.
                    if (
                        isinstance(target, ast.Name)
                        and target.id.endswith("CHECKS")
                        and isinstance(node.value, ast.Dict)
                    ):
                        for item in node.value.values:
                            for value in _id_values(item):
                                add(value, path)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and FAMILY_ID.match(node.value)
            ):
                add(node.value, path)
            elif isinstance(node, ast.JoinedStr) and _family_pattern(node):
                for value in _id_values(node):
                    add(value, path)
    return found


def documented_rows() -> list[tuple[str, str]]:
    """(id, severity cell) of every row of docs/findings.md's tables."""
    return [(i, sev.strip()) for i, sev in DOC_ROW.findall(DOC.read_text(encoding="utf-8"))]


def documented_ids() -> list[str]:
    return [i for i, _ in documented_rows()]


def test_the_collector_sees_ids_however_the_code_builds_them() -> None:
    """A collector that finds nothing would pass the real tests vacuously."""
    ids = emitted_ids()
    assert {
        "fabric.swapped",  # Finding(check=...)
        "gpu.driver",  # the probe table in checks/node.py
        "gpu.ecc",  # add("gpu.ecc", ...)
        "reimage.no-ssh",  # STEP_CHECKS = {"wait-ssh": "reimage.no-ssh", ...}
        "ansible.converge",  # check="os.unreachable" if ... else "ansible.converge"
        "reimage.<step>",  # check=STEP_CHECKS.get(step, f"reimage.{step}")
        "nccl.wrong",  # fail(..., "nccl.wrong")
        "fabric.wrong-su",  # check, why = "fabric.wrong-su", ...
        "os.<name>",  # Probe.check_id: self.check or f"os.{self.name}"
    } <= set(ids)
    assert not set(NOT_FINDING_IDS) & set(ids)
    assert not any(str(REGISTRY.relative_to(ROOT)) in where for where in ids.values())


def test_every_exception_still_names_a_literal_in_the_code() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES.rglob("*.py"))
    stale = sorted(k for k in NOT_FINDING_IDS if f'"{k}"' not in text)
    assert not stale, f"NOT_FINDING_IDS names literals the code no longer has: {stale}"


def test_every_emitted_finding_id_is_registered() -> None:
    missing = {i: sorted(where) for i, where in emitted_ids().items() if i not in CHECKS}
    assert not missing, (
        f"finding ids the code emits but {REGISTRY.relative_to(ROOT)} does not register (add "
        "them to CHECKS and a row to docs/findings.md, or to NOT_FINDING_IDS here if the literal "
        "is not a finding id): "
        + "; ".join(f"{i} ({', '.join(w)})" for i, w in sorted(missing.items()))
    )


def test_every_registered_finding_id_is_emitted() -> None:
    stale = sorted(set(CHECKS) - set(emitted_ids()))
    assert not stale, (
        f"{REGISTRY.relative_to(ROOT)} registers ids no code emits any more (remove them and "
        f"their rows in docs/findings.md, or fix the id): {', '.join(stale)}"
    )


def test_every_registered_finding_id_is_documented() -> None:
    missing = sorted(set(CHECKS) - set(documented_ids()))
    assert not missing, (
        f"{DOC.relative_to(ROOT)} has no row for these registered ids (add one to the family's "
        f"table): {', '.join(missing)}"
    )


def test_every_documented_finding_id_is_registered() -> None:
    stale = sorted(set(documented_ids()) - set(CHECKS))
    assert not stale, (
        f"{DOC.relative_to(ROOT)} documents ids {REGISTRY.relative_to(ROOT)} does not register "
        f"(remove the rows, or register the id): {', '.join(stale)}"
    )


def test_each_id_has_one_row() -> None:
    rows = documented_ids()
    twice = sorted({i for i in rows if rows.count(i) > 1})
    assert not twice, f"{DOC.relative_to(ROOT)} has more than one row for: {', '.join(twice)}"


def test_the_documented_severities_are_the_registered_ones() -> None:
    differ = {
        i: (cell, ", ".join(CHECKS[i].severities))
        for i, cell in documented_rows()
        if i in CHECKS and {s.strip() for s in cell.split(",")} != set(CHECKS[i].severities)
    }
    assert not differ, f"{DOC.relative_to(ROOT)} (documented, registered): {differ}"


def test_the_junit_cases_and_their_dependencies_are_registered_ids() -> None:
    named = {*NODE_CHECKS, *FABRIC_CHECKS, *NEEDS, *(c for cs in NEEDS.values() for c in cs)}
    assert named - set(CHECKS) == set()
    assert {CHECKS[c].area for c in FABRIC_CHECKS} == {"fabric"}


def test_the_page_is_the_one_the_registry_generates() -> None:
    """docs/findings.md is generated (scripts/findings-doc): the ids, severities, first actions
    and lift rules the tool runs on are the ones the page shows."""
    from cluster_tool.render.findings_doc import render

    template = (ROOT / "docs" / "findings.in.md").read_text(encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == render(template), (
        "docs/findings.md differs from what cluster_tool/registry.py and docs/findings.in.md "
        "generate: run scripts/findings-doc"
    )


def test_a_lift_rule_and_a_not_run_mark_reach_the_page() -> None:
    """The page is not a copy of itself: what the registry says of an id shows in its row."""
    text = DOC.read_text(encoding="utf-8")
    rows = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| `")}
    assert rows["gpu.ecc"].endswith("| when re-run clean |")
    assert rows["gpu.xid"].endswith("| never (log evidence) |")
    assert "`os.kernel-log`" in text.split("## fabric")[0]  # the not-run ids in the intro
