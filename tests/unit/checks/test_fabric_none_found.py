"""`fabric check` against a fabric that names none of the spec's nodes (another cluster's, or
node descriptions that are not rdma-ndd's `%h %d` of the spec's names) says so in one line, and
its findings are still listed (issue 33)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cluster_tool.cli import main
from tests.conftest import FIXTURES, REPO

LAB = str(REPO / "examples" / "lab.yml")
IBSIM = FIXTURES / "parsers" / "ib" / "ibnetdiscover_ibsim_hdr.txt"


def _fqdn_fabric(tmp_path: Path) -> Path:
    """The lab's fabric as ibnetdiscover shows it where rdma-ndd's %h is the FQDN."""
    text = re.sub(r'"(gpu\d{3}) ', r'"\1.dc1.example.org ', IBSIM.read_text())
    assert "gpu001.dc1.example.org mlx5_0" in text
    path = tmp_path / "ibnetdiscover.txt"
    path.write_text(text)
    return path


def test_a_fabric_naming_none_of_the_spec_nodes_is_diagnosed_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric = _fqdn_fabric(tmp_path)
    code = main(["fabric", "check", "--spec", LAB, "--ibnetdiscover", str(fabric)])
    out, err = capsys.readouterr()
    assert code == 1  # the cables the plan expects are still missing: the findings stand
    assert err.splitlines() == [
        f"cluster-tool: 0 of 4 spec nodes found in {fabric}: wrong file or naming pattern?"
    ]
    # The findings stand, one per cable: each names its own port.
    assert "gpu001 mlx5_0 is not in the fabric" in out


def test_the_diagnosis_is_in_the_json_too_and_absent_on_the_right_fabric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(
        ["fabric", "check", "--spec", LAB, "--ibnetdiscover", str(_fqdn_fabric(tmp_path)), "--json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert data["diagnosis"].startswith("0 of 4 spec nodes found")
    assert data["summary"]["spec_nodes_found"] == 0
    main(["fabric", "check", "--spec", LAB, "--ibnetdiscover", str(IBSIM), "--json"])
    out, err = capsys.readouterr()
    assert "diagnosis" not in json.loads(out) and "spec nodes found" not in err
