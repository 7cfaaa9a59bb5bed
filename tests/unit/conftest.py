"""Unit tests see no cluster context (cluster_tool.context): each test gets an empty folder, so
neither a demo lab's nor the session test lab's (whose fixture points the whole test process at
its own, for the lab tests) fills options a test leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_cluster_context(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    folder = tmp_path_factory.mktemp("contexts")
    monkeypatch.setenv("CLUSTER_TOOL_CONTEXT_DIR", str(folder))
    return folder
