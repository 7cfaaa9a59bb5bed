"""The run report: JUnit with one test case per check per node, and a self-contained report.html
(verdict first, rail × node link matrix, busbw plots with the threshold, findings worst first),
opened in headless Chromium when it is installed."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from cluster_tool.findings import Finding
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.report import write_report
from cluster_tool.report.html import findings_worst_first, render_html
from cluster_tool.report.junit import junit_xml
from cluster_tool.workflows.runs import RunRecord
from tests.browser import open_in_chromium
from tests.conftest import read_real_output

PAIR = "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"
SINGLE = "all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt"


def _points(name: str) -> list[list[float]]:
    run = parse_nccl_tests(read_real_output(name))
    return [
        [row.size, max(s.busbw for s in (row.out_of_place, row.in_place) if s is not None)]
        for row in run.rows
    ]


FINDINGS = [
    Finding(
        check="gpu.temperature",
        severity="warning",
        node="gpu001",
        message="gpu001 GPU 3 at 84 C",
    ),
    Finding(
        check="fabric.swapped",
        node="gpu002",
        component="mlx5_0,mlx5_1",
        expected="mlx5_0 on su1-leaf-r0",
        observed="mlx5_0 on su1-leaf-r1",
        message="gpu002: mlx5_0 and mlx5_1 are swapped",
    ),
    Finding(check="nccl.pair", node="gpu002", message="gpu002 + gpu001: 90 GB/s < 150 GB/s"),
]


def _summary() -> dict[str, Any]:
    links = [
        {
            "node": node,
            "rail": rail,
            "hca": f"mlx5_{rail}",
            "state": "swapped" if node == "gpu002" and rail < 2 else "up",
        }
        for node in ("gpu001", "gpu002")
        for rail in range(4)
    ]
    return {
        "command": "bringup",
        "run_id": "20261129T120000Z-abcdef",
        "verdict": "fail",
        "inputs": {"spec": "examples/lab.yml"},
        "phases": [{"name": "converge", "status": "passed", "elapsed_s": 12.0, "detail": None}],
        "nodes": {
            "gpu001": {"verdict": "pass", "reason": None, "slurm": "idle"},
            "gpu002": {"verdict": "fail", "reason": "swapped", "slurm": "idle+drain"},
        },
        "checks": {
            "gpu001": ["gpu.temperature", "gpu.ecc", "nccl.pair"],
            "gpu002": ["gpu.temperature", "gpu.ecc", "nccl.pair"],
            "fabric": ["fabric.swapped", "fabric.link-down"],
        },
        "links": links,
        "busbw": [
            {
                "rung": "single-nvls",
                "label": "gpu001 nvls",
                "floor_gbs": 360.0,
                "points": _points(SINGLE),
            },
            {
                "rung": "pairs",
                "label": "gpu001+gpu002",
                "floor_gbs": 300.0,
                "points": _points(PAIR),
            },
        ],
    }


def test_junit_has_one_case_per_check_per_node_failed_by_errors_only() -> None:
    findings = [f.model_dump() for f in FINDINGS]
    root = ET.fromstring(junit_xml(_summary(), findings))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"gpu001", "gpu002", "fabric"}
    assert [c.get("name") for c in suites["gpu001"].iter("testcase")] == [
        "gpu.temperature",
        "gpu.ecc",
        "nccl.pair",
    ]
    failed = {
        (s, c.get("name"))
        for s, suite in suites.items()
        for c in suite.iter("testcase")
        if c.find("failure") is not None
    }
    # The warning is written out but does not fail its case.
    assert failed == {("gpu002", "nccl.pair"), ("fabric", "fabric.swapped")}
    assert root.get("tests") == "8" and root.get("failures") == "2"


def test_html_is_self_contained_verdict_first_with_matrix_plots_and_worst_first_findings() -> None:
    findings = [f.model_dump() for f in FINDINGS]
    page = render_html(_summary(), findings)
    assert "<script" not in page.lower()
    # No external asset: the only URL is the SVG namespace.
    urls = set(re.findall(r"(?:https?:)?//[\w.-]+[^\s\"'<>]*", page))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert page.index('id="verdict"') < page.index('id="link-matrix"') < page.index("<svg")
    assert "FAIL · 2 error(s), 1 warning(s); fail: gpu002" in page
    matrix = page[
        page.index('id="link-matrix"') : page.index("</table>", page.index('id="link-matrix"'))
    ]
    assert matrix.count('class="fault"') == 2 and matrix.count('class="up"') == 6
    assert page.count("<polyline") == 2
    assert page.count('class="threshold"') == 2
    assert "threshold 300 GB/s" in page
    table = page[page.index('id="findings"') :]
    assert table.index("fabric.swapped") < table.index("nccl.pair") < table.index("gpu.temperature")


def test_worst_first_orders_errors_before_warnings_before_info() -> None:
    items = [
        {"severity": "info", "check": "a"},
        {"severity": "error", "check": "z"},
        {"severity": "warning", "check": "b"},
    ]
    assert [f["severity"] for f in findings_worst_first(items)] == ["error", "warning", "info"]


def test_report_opens_in_headless_chromium_without_console_errors(tmp_path: Path) -> None:
    record = RunRecord.create(tmp_path / "runs", "bringup", {})
    record.finish(_summary(), FINDINGS)
    opened = open_in_chromium(record.path / "report.html", tmp_path)
    print(f"report screenshot: {opened.screenshot}")
    assert opened.screenshot.is_file() and opened.screenshot.stat().st_size > 10_000
    assert not opened.console_errors, opened.console_errors
    assert 'id="link-matrix"' in opened.dom and opened.dom.count("<polyline") == 2


def test_report_command_rerenders_a_run(tmp_path: Path) -> None:
    from cluster_tool.cli import main

    record = RunRecord.create(tmp_path / "runs", "bringup", {})
    record.finish(_summary(), FINDINGS)
    (record.path / "report.html").unlink()
    (record.path / "junit.xml").unlink()
    code = main(["report", record.run_id, "--runs-dir", str(tmp_path / "runs")])
    assert code == 1  # the run failed; the re-render says so
    assert (record.path / "report.html").is_file() and (record.path / "junit.xml").is_file()
    assert write_report(record.path)[0].name == "junit.xml"
    assert main(["report", "no-such-run", "--runs-dir", str(tmp_path / "runs")]) == 2
