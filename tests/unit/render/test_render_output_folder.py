"""Issue 32: `render -o` writes only into a folder it made (its marker, and nothing but the files
a render writes) or an empty one; anything else is refused with the reason, and nothing in it is
touched. Before, any folder holding hosts.yml and spec.json "looked rendered" and the swap
deleted everything else in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.render.output_dir import MARKER
from tests.conftest import REPO

LAB = str(REPO / "examples" / "lab.yml")


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _render(out: Path) -> int:
    return main(["render", LAB, "-o", str(out)])


def test_an_operators_folder_holding_hosts_yml_and_spec_json_is_left_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    (out / "notes").mkdir(parents=True)
    (out / "hosts.yml").write_text("all: {}\n")
    (out / "spec.json").write_text("{}\n")
    (out / "notes" / "rack-plan.txt").write_text("row 7")
    (out / "id_ed25519").write_text("key")
    before = _tree(out)
    assert _render(out) == 2
    err = capsys.readouterr().err
    assert "refusing" in err and len(err.strip().splitlines()) == 1
    assert "notes/" in err or "id_ed25519" in err
    assert _tree(out) == before


def test_a_folder_of_other_files_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    (out / "README").write_text("mine")
    assert _render(out) == 2
    assert f"no {MARKER}" in capsys.readouterr().err
    assert _tree(out) == {"README": b"mine"}


def test_a_rendered_folder_with_a_file_of_the_operators_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "inv"
    assert _render(out) == 0
    assert (out / MARKER).is_file()
    (out / "slurm" / "my-notes.md").write_text("why gpu017 is drained")
    before = _tree(out)
    assert _render(out) == 2
    assert "slurm/my-notes.md" in capsys.readouterr().err
    assert _tree(out) == before


def test_an_empty_folder_a_rendered_one_and_one_rendered_before_the_marker_are_written(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _render(empty) == 0 and (empty / "hosts.yml").is_file()
    assert _render(empty) == 0  # its own marker now
    legacy = tmp_path / "legacy"
    assert _render(legacy) == 0
    (legacy / MARKER).unlink()  # as an older cluster-tool left it: only render's own files
    assert _render(legacy) == 0 and (legacy / MARKER).is_file()
