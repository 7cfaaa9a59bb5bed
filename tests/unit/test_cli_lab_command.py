"""`cluster-tool lab` exists only where the lab's distribution (cluster-tool-lab, the `[lab]`
extra) is installed: cluster-tool finds it through the `cluster_tool.commands` entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest


def _run_cli(argv: list[str], *, lab_installed: bool) -> subprocess.CompletedProcess[str]:
    """`cluster-tool ARGV` in a fresh interpreter; without the lab, the entry-point lookup finds
    what an install without cluster-tool-lab has: no distribution declaring the group."""
    hide = (
        "import importlib.metadata as md\n"
        "_all = md.entry_points\n"
        "def _no_lab(**kw):\n"
        "    return [e for e in _all(**kw) if not e.value.startswith('cluster_lab')]\n"
        "md.entry_points = _no_lab\n"
    )
    code = (
        (hide if not lab_installed else "")
        + "import sys\nfrom cluster_tool.cli import main\n"
        + f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_lab_distribution_declares_the_lab_command() -> None:
    declared = metadata.distribution("cluster-tool-lab").entry_points
    assert [(e.group, e.name, e.value) for e in declared] == [
        ("cluster_tool.commands", "lab", "cluster_lab.cli:register")
    ]


@pytest.mark.parametrize("argv", [["lab", "up"], ["lab", "status", "--json"]])
def test_without_the_lab_installed_lab_is_an_unknown_command(argv: list[str]) -> None:
    proc = _run_cli(argv, lab_installed=False)
    assert proc.returncode == 2
    # stdout holds nothing but, under --json, the summary every exit prints (issue 33).
    if "--json" in argv:
        assert json.loads(proc.stdout)["error"] == "No such command 'lab'."
    else:
        assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "lab" in lines[0] and "No such command" in lines[0], proc.stderr


def test_without_the_lab_installed_every_other_command_is_there() -> None:
    without = _run_cli(["--help"], lab_installed=False)
    with_lab = _run_cli(["--help"], lab_installed=True)
    assert without.returncode == with_lab.returncode == 0
    assert "│ lab " in with_lab.stdout and "│ lab " not in without.stdout
    assert _run_cli(["spec", "--help"], lab_installed=False).returncode == 0


@pytest.mark.parametrize("argv", [["--help"], ["spec", "--help"]])
def test_a_broken_extra_area_is_named_and_every_other_command_still_works(
    argv: list[str],
) -> None:
    # An install whose cluster-tool-lab metadata outlived its package (a removed checkout).
    # The extra areas are read where the whole app is built (`--help`, a word that is not one
    # of the product's commands); a product command registers its own area only.
    broken = (
        "import importlib.metadata as md\n"
        "_gone = md.EntryPoint('lab', 'cluster_lab_gone.cli:register', 'cluster_tool.commands')\n"
        "md.entry_points = lambda **kw: [_gone]\n"
        "import sys\nfrom cluster_tool.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", broken], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"Usage: cluster-tool {' '.join(argv[:-1])}".rstrip() in proc.stdout
    named = [
        "cluster-tool: command area 'lab' not loaded (cluster_lab_gone.cli:register): "
        "No module named 'cluster_lab_gone'"
    ]
    assert proc.stderr.splitlines() == (named if argv == ["--help"] else [])
