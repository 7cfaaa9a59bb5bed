"""How the lab's modules may import: the simulators (`cluster_lab/sim`) run inside lab nodes,
which have python3 and nothing else, so they import only the standard library and each other;
and no two modules of the lab import each other, even through an import inside a function."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import cluster_lab
from cluster_lab.sim.packages import HOST_ONLY

LAB = Path(cluster_lab.__file__).parent
MODULES = {
    ".".join(p.relative_to(LAB.parent).with_suffix("").parts): p
    for p in LAB.rglob("*.py")
    if "__pycache__" not in p.parts
}


def _imports(name: str) -> list[tuple[int, str]]:
    """(line, absolute name) of every import in module `name`, wherever it stands (top level or
    inside a function); for `from X import y`, both X and X.y (y may be a module)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{node.module}" if node.module else parent
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def test_the_simulators_import_only_the_standard_library_and_each_other() -> None:
    in_nodes = [n for n, p in MODULES.items() if n.startswith("cluster_lab.sim.")]
    in_nodes = [n for n in in_nodes if MODULES[n].name not in HOST_ONLY]
    assert "cluster_lab.sim.nccl_tests" in in_nodes
    outside = [
        f"{MODULES[name].name}:{line}: {module}"
        for name in sorted(in_nodes)
        for line, module in _imports(name)
        if not module.startswith("cluster_lab.sim")
        and module.split(".")[0] not in sys.stdlib_module_names
    ]
    assert outside == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = "open"
        stack.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return found


def test_no_two_lab_modules_import_each_other() -> None:
    # Packages' __init__ modules are empty: importing a module through them is no edge.
    modules = {n for n, p in MODULES.items() if p.name != "__init__.py"}
    graph = {name: {m for _, m in _imports(name) if m in modules and m != name} for name in modules}
    assert (
        "cluster_lab.lifecycle" in graph["cluster_lab.live_faults"]
    )  # imports inside functions count
    assert _cycles(graph) == []
