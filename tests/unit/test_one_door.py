"""Every drain and every resume the tool makes in Slurm goes through the one door,
`cluster_tool/admission.py` (issue 30): no other module calls Slurm's `drain` or `resume`, and
only the Slurm client itself writes `state=resume` / `state=drain` into a command. Read from
the sources, so a new path around the door fails here before it runs anywhere.
Against 6a54dd4 it names 16 call sites in 8 files."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cluster_tool"
DOOR = PACKAGE / "admission.py"
CLIENT = PACKAGE / "slurm.py"
# The registry's first actions tell a person what to type; they run nothing.
WORDS = PACKAGE / "registry.py"


def _calls(attr: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DOOR:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == attr
                # `m.drain(...)` of the re-image machine is its own step, not Slurm's.
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "m")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_the_door_resumes_a_node() -> None:
    assert _calls("resume") == []


def test_only_the_door_drains_a_node() -> None:
    assert _calls("drain") == []


def test_only_the_slurm_client_spells_the_state_change() -> None:
    spelled = [
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if p not in (CLIENT, WORDS)
        and ("state=resume" in p.read_text() or "state=drain" in p.read_text())
    ]
    assert spelled == []


def test_the_scan_sees_a_call_where_there_is_one() -> None:
    """The door itself calls both: a scan that found nothing anywhere would pass vacuously."""
    text = DOOR.read_text(encoding="utf-8")
    assert "self.slurm.resume(" in text and "self.slurm.drain(" in text
