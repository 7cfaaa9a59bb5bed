"""The CLI contract: exit codes and one-line errors."""

from __future__ import annotations

import subprocess
import sys

from cluster_tool.cli import main


def test_version_exits_zero(capsys: object) -> None:
    assert main(["--version"]) == 0


def test_unknown_command_is_usage_error() -> None:
    assert main(["no-such-command"]) == 2


def test_python_dash_m_runs_the_same_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cluster_tool", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("cluster-tool ")
