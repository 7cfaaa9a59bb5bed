"""`cluster-tool versions` on a real fleet's scale, shown as `clush -b` shows output (issue 33):
nodes that run the same are one line with their hostlist, a node with one adapter off is a line
of its own; severities coloured on a terminal and never under NO_COLOR; a capture that holds
none of the spec's nodes is said so in one line.

The fleet is 32 HGX H100 nodes that each answer with the real `ibstat` of an H100 node (eight
ConnectX-7 at firmware 28.41.1000 and a BlueField-3 at 32.38.3056, first line of the capture);
on one of them one ConnectX-7 runs 28.39.1002, the ConnectX-7 firmware of another real H100
capture (ibstat_h100_ib_active_some_eth_down.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool import output
from cluster_tool.cli import main
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from tests.conftest import REPO, read_real_output

NODES = [f"gpu{i:03d}" for i in range(1, 33)]
ODD = "gpu017"


def _spec(tmp_path: Path) -> Path:
    """The 1-SU example with its full 32 GPU nodes."""
    text = (REPO / "examples" / "h100-1su.yml").read_text()
    assert text.count("gpu[001-031]") == 1
    spec = tmp_path / "h100-32.yml"
    spec.write_text(text.replace("gpu[001-031]", "gpu[001-032]"))
    return spec


def _capture(tmp_path: Path, names: list[str] = NODES) -> Path:
    ibstat = read_real_output("ibstat_h100_8xcx7_ndr_ib_all_active.txt")
    assert ibstat.count("Firmware version: 28.41.1000") == 8
    results = {}
    for name in names:
        text = ibstat
        if name == ODD:  # the first adapter (mlx5_0) only
            text = text.replace("Firmware version: 28.41.1000", "Firmware version: 28.39.1002", 1)
        results[name] = HostResult(name, {"ibstat": ProbeOutput(0, text)}, probes=("ibstat",))
    folder = tmp_path / "capture"
    save_capture(folder, results)
    return folder


def test_thirty_one_alike_are_one_line_and_the_odd_node_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["versions", "--spec", str(_spec(tmp_path)), "--from", str(_capture(tmp_path))])
    lines = capsys.readouterr().out.splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith(("ERROR", "WARN")))]
    cx7 = [line.split() for line in table if "28.41.1000" in line or "28.39.1002" in line]
    others = [n for n in NODES if n != ODD]
    assert cx7 == [
        ["hca_firmware", "ConnectX-7", "28.41.1000", "31", "gpu[001-016,018-032]"],
        ["28.41.1000,", "mlx5_0", "28.39.1002", "1", ODD],
    ], lines
    assert len(others) == 31
    # Every component a line per distinct answer: the BlueField-3 too, once for all 32.
    bf3 = [line.split() for line in table if "32.38.3056" in line]
    assert bf3 == [["hca_firmware", "BlueField-3", "32.38.3056", "32", "gpu[001-032]"]], lines


def test_outlier_findings_fold_and_severities_are_coloured_on_a_terminal_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["versions", "--spec", str(_spec(tmp_path)), "--from", str(_capture(tmp_path))]
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: write styles as a terminal would get them
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(output, "_consoles", {})
    main(args)
    coloured = capsys.readouterr().out
    assert "\x1b[33mWARNING" in coloured, coloured  # yellow
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(output, "_consoles", {})
    main(args)
    plain = capsys.readouterr().out
    assert "\x1b[" not in plain, plain
    # The outlier once, naming the odd adapter.
    outliers = [line for line in plain.splitlines() if "version.outlier" in line]
    assert len(outliers) == 1 and f"{ODD} mlx5_0 runs ConnectX-7 firmware 28.39.1002" in outliers[0]


def test_a_capture_of_another_cluster_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = _capture(tmp_path, [f"node-{i}" for i in range(4)])
    main(["versions", "--spec", str(_spec(tmp_path)), "--from", str(capture)])
    err = capsys.readouterr().err
    diagnosis = [line for line in err.splitlines() if "0 of 32 spec nodes found" in line]
    assert diagnosis == [
        f"cluster-tool: 0 of 32 spec nodes found in {capture}: wrong file or naming pattern?"
    ], err
