"""`cluster-tool parse KIND FILE --json` for the IB and nccl-tests kinds: what a user scripts."""

from __future__ import annotations

import json

import pytest

from cluster_tool.cli import main
from tests.conftest import FIXTURES, REAL_OUTPUTS

IB = FIXTURES / "parsers" / "ib"


def test_parse_ibnetdiscover_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "ibnetdiscover", str(IB / "ibnetdiscover_ibsim_hdr.txt"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["nodes"]) == 10
    leaf = next(n for n in data["nodes"] if n["description"] == "MF0;su1-leaf-r0:MQM8700/U1")
    assert leaf["kind"] == "switch" and leaf["ports"][3]["width"] == 1


def test_parse_nccl_tests_json_of_a_real_run(capsys: pytest.CaptureFixture[str]) -> None:
    # The real capture's first line names its source; nccl-tests output ignores such lines.
    path = REAL_OUTPUTS / "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"
    assert main(["parse", "nccl-tests", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["avg_busbw"] == 139.56 and data["complete"] is True and len(data["ranks"]) == 16
    assert data["rows"][-1]["out_of_place"]["busbw"] == 469.21


def test_parse_wrong_kind_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "iblinkinfo", str(IB / "perfquery_ibsim.txt"), "--json"]) == 2
    err = capsys.readouterr().err
    # One line naming the line the parser could not read.
    assert ":1: expected `Switch:`/`CA:`" in err and "# Port counters" in err
