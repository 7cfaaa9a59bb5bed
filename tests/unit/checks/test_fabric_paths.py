"""`fabric check` (an operator's saved files) and `validate --fabric` (what the subnet manager
printed, here replayed from a capture) judge the fabric through one function
(`checks.fabric.fabric_findings`): the same outputs give the same findings, in the same order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.spec import load_spec
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText

LAB = REPO / "examples" / "lab.yml"

# ibqueryerrors' format (infiniband-diags): one HCA port over the lab's symbol-error limit (10).
DIRTY_CABLE = (
    'Errors for "gpu002 mlx5_3"\n'
    "   GUID 0xa088c20300000013 port 1: [SymbolErrorCounter == 11] [PortRcvErrors == 3]\n"
    "\n## Summary: 45 nodes checked, 1 bad nodes found\n"
    "##          110 ports checked, 1 ports have errors beyond threshold\n"
)


def _miswired() -> str:
    cluster = load_spec(LAB)
    fabric = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster), speed="HDR")
    fabric.model = "MQM8700"
    fabric.swap("gpu003", "mlx5_0", "mlx5_3")
    fabric.cut("gpu004", "mlx5_9")
    fabric.add_host("laptop mlx5_0", "su1-leaf-r0", 20)  # not a host of the spec: a warning
    return fabric.text()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def _saved(tmp_path: Path, ibnetdiscover: str, ibqueryerrors: str) -> tuple[Path, Path, Path]:
    capture = tmp_path / "capture"
    outputs = {
        "ibnetdiscover": ProbeOutput(0, ibnetdiscover),
        "ibqueryerrors": ProbeOutput(0, ibqueryerrors),
    }
    save_capture(capture, {"head": HostResult("head", outputs=outputs, probes=tuple(outputs))})
    (tmp_path / "ibnetdiscover.txt").write_text(ibnetdiscover)
    (tmp_path / "ibqueryerrors.txt").write_text(ibqueryerrors)
    return capture, tmp_path / "ibnetdiscover.txt", tmp_path / "ibqueryerrors.txt"


def test_fabric_check_and_validate_fabric_give_the_same_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture, discovered, counters = _saved(tmp_path, _miswired(), DIRTY_CABLE)
    spec = str(LAB)
    offline, report = _run(
        ["fabric", "check", "--spec", spec, "--ibnetdiscover", str(discovered),
         "--counters", str(counters), "--json"],
        capsys,
    )  # fmt: skip
    live, validated = _run(["validate", spec, "--fabric", "--from", str(capture), "--json"], capsys)
    assert offline == live == 1
    assert report["findings"] == validated["findings"]
    # Worst first in both, the stranger's cable (a warning) after every error.
    assert [(f["check"], f["node"], f["severity"]) for f in report["findings"]] == [  # type: ignore[index, union-attr]
        ("fabric.swapped", "gpu003", "error"),
        ("fabric.link-down", "gpu004", "error"),
        ("fabric.errors", "gpu002", "error"),
        ("fabric.unexpected", "laptop", "warning"),
    ]


def test_without_counters_fabric_check_judges_none_and_validate_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An operator who gives no --counters asked for none; a subnet manager whose ibqueryerrors
    # printed nothing leaves every port unjudged, which validate must not pass.
    capture, discovered, _ = _saved(tmp_path, _miswired(), "")
    spec = str(LAB)
    _, report = _run(
        ["fabric", "check", "--spec", spec, "--ibnetdiscover", str(discovered), "--json"], capsys
    )
    _, validated = _run(["validate", spec, "--fabric", "--from", str(capture), "--json"], capsys)
    offline = {f["check"] for f in report["findings"]}  # type: ignore[union-attr, index]
    live = {f["check"] for f in validated["findings"]}  # type: ignore[union-attr, index]
    assert live - offline == {"ib.counters-unread"}
    assert "fabric.errors" not in offline | live
