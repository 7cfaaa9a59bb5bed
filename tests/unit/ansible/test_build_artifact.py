"""The cluster_tool_node role's artifact build on the controller: a tree it has built before is
found by its sources' digest without starting pip; any change to the package or the project
metadata builds again; a note whose artifact is gone builds again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO


def _module() -> ModuleType:
    path = REPO / "roles" / "cluster_tool_node" / "files" / "build_artifact.py"
    spec = importlib.util.spec_from_file_location("build_artifact", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "cluster_tool" / "checks").mkdir(parents=True)
    (src / "pyproject.toml").write_text('[project]\nname = "cluster-tool"\nversion = "0.1.0"\n')
    (src / "README.md").write_text("cluster-tool\n")
    (src / "cluster_tool" / "__init__.py").write_text("")
    (src / "cluster_tool" / "checks" / "gpu.py").write_text("LIMIT = 1\n")
    return src


def test_an_unchanged_tree_is_not_built_twice_and_a_changed_one_is(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _module()
    builds: list[str] = []

    def fake_build(source: Path, build_dir: Path, python: str) -> dict[str, object]:
        key = f"0.1.0-{len(builds)}-py{python}"
        artifact = build_dir / f"cluster-tool-{key}.tar"
        artifact.write_bytes(b"wheels")
        builds.append(key)
        return {"artifact": str(artifact), "key": key, "python": python, "changed": True}

    monkeypatch.setattr(mod, "_build", fake_build)
    out = tmp_path / "out"
    first = mod.build(tree, out)
    again = mod.build(tree, out)
    assert first["changed"] is True and again["changed"] is False
    assert again["key"] == first["key"] and len(builds) == 1
    # A compiled module beside the sources changes nothing the wheel holds.
    (tree / "cluster_tool" / "__pycache__").mkdir()
    (tree / "cluster_tool" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert mod.build(tree, out)["changed"] is False
    (tree / "cluster_tool" / "checks" / "gpu.py").write_text("LIMIT = 2\n")
    changed = mod.build(tree, out)
    assert changed["changed"] is True and changed["key"] != first["key"]
    (tree / "pyproject.toml").write_text('[project]\nname = "cluster-tool"\nversion = "0.1.1"\n')
    assert mod.build(tree, out)["changed"] is True
    # The artifact the note names was removed (a cleaned cache): built again.
    Path(str(mod.build(tree, out)["artifact"])).unlink()
    assert mod.build(tree, out)["changed"] is True
    assert len(builds) == 4
