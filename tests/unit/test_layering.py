"""The package's layers, as docs/architecture.md draws them: the command line over the
workflows, over the judges and the doors to outside systems, over the pure models, parsers and
renderers, over the foundations. A module may import its own layer or one below, never one
above; no two parts of `cluster_tool` import each other, even through others; and the product
never imports the lab (`cluster_lab`, or the old `cluster_tool/lab`), which may import the
product.

Imports are read from the sources (every `import`, also inside functions and under
TYPE_CHECKING: a lazy import is still an arrow), not from a running interpreter.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cluster_tool"
LAB_PACKAGES = ("cluster_lab", "cluster_tool.lab")

# Each top-level part of cluster_tool (a subpackage or a module) and its layer, highest first.
LAYERS: dict[str, int] = {
    # 4: the command line: parses options, calls a job or a judge, prints
    "__main__": 4,
    "cli": 4,
    "commands": 4,
    # 3: the jobs: bring-up, re-image, validate, collection, node-check
    "workflows": 3,
    "watch": 3,  # cluster-tool watch: the in-service job (issue 22)
    # 2: the judges and the doors to outside systems (SSH fan-out, Slurm, Ansible, Redfish)
    "checks": 2,
    "gate": 2,
    "remote": 2,
    "report": 2,
    "slurm": 2,
    "ansible": 2,
    "bmc": 2,
    "plan": 2,  # the planner: reads the gate's rung thresholds
    "history": 2,  # the measurement store: judges a node against its own runs
    "admission": 2,  # the one door into and out of service: every drain and resume
    # 1: pure models, parsers, probes and renderers
    "parsers": 1,
    "probes": 1,
    "render": 1,
    "fabric": 1,
    "spec": 1,
    "compat": 1,  # the compatibility matrix: spec.pins and checks.versions hold versions to it
    "nodes": 1,
    "verdicts": 1,
    "context": 1,
    # 0: foundations every layer may use
    "": 0,  # cluster_tool/__init__.py
    "errors": 0,
    "findings": 0,
    "fileio": 0,
    "redact": 0,
    "bounds": 0,
    "polling": 0,
    "output": 0,
    "drains": 0,
    "registry": 0,  # every finding id and how it behaves (verdicts, lifts, planned cases)
}

# Parts that use nothing of their own layer: `remote` carries probes to hosts and back, `checks`
# only judges what it is given (neither collects, reports nor runs a job).
ONLY_BELOW = ("remote", "checks")
# The jobs stand side by side: a probe, a parser or a judge two of them share lives below
# both (`probes/`, `parsers/`, `checks/`), never in one job for the other to import.
JOBS = ("workflows", "watch")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _part(module: str) -> str:
    """`cluster_tool.checks.node` -> `checks`; the package itself -> ``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_lab(module: str) -> bool:
    return any(module == lab or module.startswith(lab + ".") for lab in LAB_PACKAGES)


@functools.cache
def imports() -> dict[str, list[tuple[str, int]]]:
    """Every cluster_tool module outside the lab -> the modules it imports, with the line."""
    found: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if _is_lab(module):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names: list[tuple[str, int]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [(alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # `from cluster_tool import output` imports the module cluster_tool.output.
                names += [(target, node.lineno)]
                if target == "cluster_tool":
                    names += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
        found[module] = names
    return found


def _ours(target: str) -> bool:
    return target == "cluster_tool" or target.startswith("cluster_tool.")


def upward_arrows() -> dict[tuple[str, str], str]:
    """(importer, imported) -> where, for each import of a higher layer."""
    arrows: dict[tuple[str, str], str] = {}
    for module, names in imports().items():
        mine = LAYERS[_part(module)]
        for target, line in names:
            if not _ours(target) or _is_lab(target) or _part(target) not in LAYERS:
                continue
            if LAYERS[_part(target)] > mine:
                arrows[(module, target)] = (
                    f"{module}:{line} (layer {mine}) imports {target} "
                    f"(layer {LAYERS[_part(target)]})"
                )
    return arrows


def part_arrows() -> dict[tuple[str, str], str]:
    """(part, part) -> the first import that makes one part use another."""
    edges: dict[tuple[str, str], str] = {}
    for module, names in imports().items():
        for target, line in names:
            if _ours(target) and not _is_lab(target) and _part(target) != _part(module):
                edges.setdefault((_part(module), _part(target)), f"{module}:{line} -> {target}")
    return edges


def cycles(edges: dict[tuple[str, str], str]) -> list[list[str]]:
    """The groups of parts that reach each other (strongly connected, more than one part)."""
    out: dict[str, set[str]] = {}
    for a, b in edges:
        out.setdefault(a, set()).add(b)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in out.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reaches = {part: reach(part) for part in out}
    groups = {frozenset({p} | {q for q in reaches[p] if p in reaches.get(q, set())}) for p in out}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def test_the_reader_sees_imports_however_they_are_written() -> None:
    """A reader that sees nothing would pass the real tests vacuously."""
    found = imports()
    checks_imports = {t for t, _ in found["cluster_tool.commands.checks"]}
    assert "cluster_tool.workflows.collect" in checks_imports  # inside a function
    assert "cluster_tool.output" in checks_imports  # from cluster_tool import output
    assert "cluster_tool.findings" in checks_imports  # under TYPE_CHECKING
    assert not any(_is_lab(m) for m in found)


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {_part(m) for m in imports()}
    assert parts - set(LAYERS) == set(), "add the new part to LAYERS, in the layer it belongs"
    assert set(LAYERS) - parts == set(), "a part in LAYERS no longer exists: remove it"


def test_no_module_imports_a_layer_above_it() -> None:
    arrows = upward_arrows()
    assert not arrows, "imports of a higher layer:\n" + "\n".join(sorted(arrows.values()))


def test_remote_and_checks_import_only_layers_below_theirs() -> None:
    sideways = sorted(
        f"{where} (layer {LAYERS[b]})"
        for (a, b), where in part_arrows().items()
        if a in ONLY_BELOW and LAYERS[b] >= LAYERS[a]
    )
    assert not sideways, "\n".join(sideways)


def test_no_job_imports_another_job() -> None:
    sideways = sorted(
        where for (a, b), where in part_arrows().items() if a in JOBS and b in JOBS and a != b
    )
    assert not sideways, "a job importing another (move what they share a layer down):\n" + (
        "\n".join(sideways)
    )


def test_no_two_parts_of_the_package_import_each_other() -> None:
    edges = part_arrows()
    found = cycles(edges)
    assert not found, "import cycles between parts:\n" + "\n".join(
        " <-> ".join(group)
        + ": "
        + "; ".join(v for (a, b), v in sorted(edges.items()) if a in group and b in group)
        for group in found
    )


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({("a", "b"): "", ("b", "c"): "", ("c", "a"): "", ("c", "d"): ""}) == [
        ["a", "b", "c"]
    ]


def test_the_product_never_imports_the_lab() -> None:
    into_lab = sorted(
        f"{module}:{line} imports {target}"
        for module, names in imports().items()
        for target, line in names
        if _is_lab(target)
    )
    assert into_lab == []
