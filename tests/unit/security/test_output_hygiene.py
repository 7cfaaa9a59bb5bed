"""Text from outside is shown as data: terminal escape sequences from nodes, tools or file names
are printed escaped, rich markup in a path is printed as written, and JUnit stays valid XML."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cluster_tool import output
from cluster_tool.cli import main
from cluster_tool.report.junit import junit_xml
from tests.conftest import REPO

# What a compromised node could put in its node description or dmesg: clear the screen, move
# the cursor up over the error line, ring the bell, and a right-to-left override.
HOSTILE = "gpu001 \x1b[2J\x1b[1A\rok\x07 \u202egnp"


def test_escape_sequences_in_an_error_are_shown_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["spec", "check", f"/nonexistent/{HOSTILE}.yml"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "\x07" not in err and "\u202e" not in err
    assert "\\x1b[2J\\x1b[1A\\x0dok\\x07 \\u202egnp" in err
    assert len(err.strip().splitlines()) == 1


def test_escape_sequences_printed_on_the_console_are_shown_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    output.stdout.print(f"node: {HOSTILE}")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J" in out


def test_rich_markup_in_an_output_path_is_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "lab.yml"
    shutil.copy(REPO / "examples" / "lab.yml", spec)
    out = tmp_path / "out[/b][bold]"
    assert main(["render", str(spec), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"into {out} (" in captured.out, captured
    assert (out / "hosts.yml").is_file()


def test_junit_holding_control_characters_is_still_valid_xml() -> None:
    finding = {
        "check": "gpu.xid",
        "severity": "error",
        "node": "gpu001",
        "message": f"Xid 79 on {HOSTILE}\x00\x1b[31m\ud800",
    }
    text = junit_xml({"checks": {"gpu001": ["gpu.xid"]}}, [finding])
    root = ET.fromstring(text.encode("utf-8"))
    failure = root.find("./testsuite/testcase/failure")
    assert failure is not None
    assert failure.get("message") == (
        "Xid 79 on gpu001 \\x1b[2J\\x1b[1A\\x0dok\\x07 \\u202egnp\\x00\\x1b[31m\\ud800"
    )
