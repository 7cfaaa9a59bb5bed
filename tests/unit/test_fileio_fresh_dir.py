"""fresh_dir: every run gets a folder of its own under a long-kept base, never an old one."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.errors import UsageError
from cluster_tool.fileio import fresh_dir


def test_runs_in_the_same_second_get_folders_of_their_own(tmp_path: Path) -> None:
    folders = [fresh_dir(tmp_path / "shared", "gate-") for _ in range(50)]
    assert len(set(folders)) == 50
    assert all(f.is_dir() and f.name.startswith("gate-") and not any(f.iterdir()) for f in folders)


def test_a_base_that_cannot_hold_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot create a work folder"):
        fresh_dir(tmp_path / "file", "gate-")
