"""Units named one way (issue 33, docs/units.md): GB/s keys end `_gbs`, Gb/s keys `_gbps`,
all lower case, in the code, the spec's schema and the JSON a parser prints. docs/units.md said
`_GBps` while `history --metric busbw_gbs` and the profiles' `expected_busbw_*_gbs` did not."""

from __future__ import annotations

import json
import re

import pytest

from cluster_tool.cli import main
from tests.conftest import FIXTURES, REPO

# The deprecated readers of the renamed NVLink speed, kept for old callers.
KEPT_FOR_OLD_CALLERS = {"speed_GBps"}


def test_no_key_in_the_code_is_named_in_capital_gigabytes() -> None:
    found = {
        (path.relative_to(REPO).as_posix(), name)
        for path in (REPO / "cluster_tool").rglob("*.py")
        for name in re.findall(r"\b\w+_G[Bb]ps\b|\b\w+_GBs\b", path.read_text())
        if name not in KEPT_FOR_OLD_CALLERS
    }
    assert found == set()


def test_the_schema_and_the_docs_say_gbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "schema"]) == 0
    schema = capsys.readouterr().out
    assert "expected_busbw_single_node_gbs" in schema and "GBps" not in schema
    units = (REPO / "docs" / "units.md").read_text()
    assert "| `_gbs` |" in units and "| `_GBps` |" not in units


def test_a_parser_prints_gb_per_second_as_gbs(capsys: pytest.CaptureFixture[str]) -> None:
    capture = FIXTURES / "parsers" / "nvidia" / "nvidia-smi-nvlink-s_a100x8_gpud.txt"
    assert main(["parse", "nvidia-smi-nvlink", str(capture), "--json"]) == 0
    link = json.loads(capsys.readouterr().out)[0]["links"][0]
    assert "speed_gbs" in link and not any(k.endswith(("GBps", "_gbps")) for k in link)
