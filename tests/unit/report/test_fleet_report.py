"""report.html at fleet scale (issue 22): a 1,024-node validation, recorded through the real
run record, renders a page of a few MB with one heat-map cell per node-rail, names a planted
slow rail by node and rail in its rung's distribution, groups 1,000 identical findings into one
row, and opens in headless Chromium without console errors."""

from __future__ import annotations

import functools
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.findings import Finding
from cluster_tool.report.html import render_html
from cluster_tool.workflows import common
from cluster_tool.workflows.runs import RunRecord
from tests.browser import open_in_chromium
from tests.unit.report.fleet_run import (
    BER_NODE,
    HOT_NODES,
    NO_BER_NODE,
    NODES,
    SLOW_NODE,
    SLOW_PARTNER,
    SLOW_RAIL,
    cached_parse,
    fleet_run,
)

__all__ = ["cached_parse"]  # the fixture, used by name

MAX_BYTES = 4 * 1024 * 1024


class _Page(HTMLParser):
    """What a reader of the page sees: heat-map cells (title -> classes), outlier labels under
    the distributions, and the findings table's group rows (cells as text)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, set[str]] = {}
        self.outliers: list[str] = []
        self.groups: list[list[str]] = []
        self._in_heat = 0
        self._outlier = False
        self._group: list[str] | None = None
        self._cell: list[str] | None = None
        self._depth = 0  # tables nested in a group row's <details>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        got = dict(attrs)
        if got.get("id") == "heat-map":
            self._in_heat = 1
        elif self._in_heat and tag == "div":
            self._in_heat += 1
        if self._in_heat and tag == "i" and got.get("class") and got.get("title"):
            self.cells[str(got["title"])] = set(str(got["class"]).split())
        if tag == "text" and got.get("class") == "outlier":
            self._outlier = True
        if tag == "tr" and got.get("class") == "finding-group":
            self._group = []
        elif self._group is not None and tag == "table":
            self._depth += 1
        elif self._group is not None and tag == "td" and not self._depth:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if self._in_heat and tag == "div":
            self._in_heat -= 1
        if tag == "text":
            self._outlier = False
        if self._group is not None:
            if tag == "table" and self._depth:
                self._depth -= 1
            elif tag == "td" and not self._depth and self._cell is not None:
                self._group.append("".join(self._cell).strip())
                self._cell = None
            elif tag == "tr" and not self._depth:
                self.groups.append(self._group)
                self._group = None

    def handle_data(self, data: str) -> None:
        if self._outlier:
            self.outliers.append(data)
        if self._cell is not None and not self._depth:
            self._cell.append(data)


def _read(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


def _cell(parsed: _Page, node: str, rail: int) -> tuple[str, set[str]]:
    (hit,) = [(t, c) for t, c in parsed.cells.items() if t.startswith(f"{node} ") and
              f" rail {rail}:" in t]  # fmt: skip
    return hit


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run with gpu0513's rail 3 slow, recorded as a validation finishes: (report, text)."""
    tmp = tmp_path_factory.mktemp("fleet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common, "parse_nccl_tests", functools.cache(common.parse_nccl_tests))
        summary, findings = fleet_run(tmp / "work", slow=True)
    record = RunRecord.create(tmp / "runs", "validate", {})
    record.finish(summary, [Finding(**f) for f in findings])
    page = record.path / "report.html"
    return page, page.read_text()


def test_a_1024_node_report_stays_under_4_mb_with_one_cell_per_node_rail(
    planted: tuple[Path, str],
) -> None:
    path, page = planted
    size = path.stat().st_size
    print(f"report.html for 1,024 nodes x 8 rails: {size / 1e6:.2f} MB")
    assert size < MAX_BYTES
    parsed = _read(page)
    where = {(t.split()[0], int(t.split(" rail ", 1)[1].split(":")[0])) for t in parsed.cells}
    assert len(parsed.cells) == 8192
    assert where == {(n, r) for n in NODES for r in range(8)}
    # 1,024 nodes do not get a 1,024-column table: the heat map is the matrix.
    assert 'id="link-matrix"' not in page
    # Offline: no script, and no URL but the SVG namespace.
    assert "<script" not in page.lower()
    assert set(re.findall(r"(?:https?:)?//[\w.-]+[^\s\"'<>]*", page)) == {
        "http://www.w3.org/2000/svg"
    }


def test_a_planted_slow_rail_is_named_by_node_and_rail(planted: tuple[Path, str]) -> None:
    parsed = _read(planted[1])
    pair = f"{SLOW_NODE}+{SLOW_PARTNER}"
    # Its rails-rung job is the rails distribution's one outlier, labelled with the rail; its
    # pair job the pairs rung's one (a pair runs on every rail).
    assert sorted(label.split(":")[0] for label in parsed.outliers) == [
        pair,
        f"{pair} rail {SLOW_RAIL}",
    ]
    title, css = _cell(parsed, SLOW_NODE, SLOW_RAIL)
    assert "w2" in css and "k2" in css, (title, css)  # below its floor: red
    assert "(floor 39.3)" in title and SLOW_PARTNER in title
    for rail in set(range(8)) - {SLOW_RAIL}:
        assert "w0" in _cell(parsed, SLOW_NODE, rail)[1]
    # The job ran two nodes on the rail: both are below the floor there, and no other cell.
    bad = {(t.split()[0], t.split(" rail ")[1].split(":")[0]) for t, c in parsed.cells.items()
           if "w2" in c}  # fmt: skip
    assert bad == {(SLOW_NODE, str(SLOW_RAIL)), (SLOW_PARTNER, str(SLOW_RAIL))}


def test_without_the_plant_no_job_is_called_an_outlier(tmp_path: Path, cached_parse: None) -> None:
    summary, findings = fleet_run(tmp_path, slow=False)
    parsed = _read(render_html(summary, findings))
    assert parsed.outliers == []
    assert not [t for t, c in parsed.cells.items() if "w2" in c or "w1" in c]


def test_the_ber_the_link_check_found_colours_its_node_rail(planted: tuple[Path, str]) -> None:
    parsed = _read(planted[1])
    title, css = _cell(parsed, BER_NODE, 5)
    assert "b1" in css and "link.ber raw BER 3e-06" in title
    assert sum("b1" in c for c in parsed.cells.values()) == 1
    # Judged and clean is good; not judged (the check was skipped there) is no data.
    assert "b0" in _cell(parsed, BER_NODE, 4)[1]
    assert all("b3" in _cell(parsed, NO_BER_NODE, rail)[1] for rail in range(8))
    assert sum("b3" in c for c in parsed.cells.values()) == 8


def test_1000_identical_findings_are_one_row_with_their_count(planted: tuple[Path, str]) -> None:
    page = planted[1]
    parsed = _read(page)
    assert [g[:3] for g in parsed.groups] == [
        ["warning", "gpu.temperature", "1000"],
        ["warning", "link.ber", "1"],
    ]
    assert parsed.groups[0][3] == "gpu[0001-1000]" and len(HOT_NODES) == 1000
    assert parsed.groups[1][3] == BER_NODE
    # Behind the row, the findings themselves (the first 500; findings.json holds them all).
    details = page[page.index('id="findings"') :]
    assert "gpu0500 GPU 3 at 84 C" in details and "500 more in findings.json" in details


def test_the_fleet_report_opens_in_headless_chromium_without_console_errors(
    planted: tuple[Path, str], tmp_path: Path
) -> None:
    opened = open_in_chromium(planted[0], tmp_path)
    assert not opened.console_errors, opened.console_errors
    assert opened.screenshot.is_file() and opened.screenshot.stat().st_size > 10_000
    assert 'id="heat-map"' in opened.dom
    assert opened.dom.count('<i class="k') == 8192


def _hostile() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    node = 'gpu<b>"01'
    links = [
        {"node": node, "rail": r, "hca": f"mlx5_{r}<i>", "state": "up", "detail": "<u>x</u>"}
        for r in range(8)
    ]
    rows = [
        {
            "rung": "rails<s>",
            "label": f"{node} rail{r}",
            "nodes": [node, "gpu<em>02"],
            "rail": r,
            "floor_gbs": 40.0,
            "points": [[1 << 30, 10.0 if r == 2 else 50.0 + r / 10]],
        }
        for r in range(8)
    ]
    findings = [
        {
            "check": "link.ber<script>",
            "severity": "warning",
            "node": node,
            "component": "<img src=x>",
            "expected": "<a>",
            "observed": "raw BER 3e-06 <b>",
            "message": "<script>alert(1)</script>",
        }
    ]
    return {"command": "validate", "links": links, "busbw": rows, "nodes": {}}, findings


def test_node_fabric_and_finding_text_is_escaped_in_every_new_section() -> None:
    summary, findings = _hostile()
    page = render_html(summary, findings)
    for raw in ("<b>", "<i>", "<u>", "<s>", "<em>", "<script", "<img", "<a>"):
        assert raw not in page, raw
    assert "gpu&lt;b&gt;&quot;01" in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parsed = _read(page)
    assert len(parsed.cells) == 8
    # The page shows the text as it was, escaped, not markup.
    assert parsed.outliers == ['gpu<b>"01+gpu<em>02 rail 2: 10.0 GB/s']


def test_the_headline_names_twenty_failed_nodes_and_counts_the_rest() -> None:
    nodes = {n: {"verdict": "fail" if n in HOT_NODES else "pass"} for n in NODES}
    page = render_html({"command": "validate", "verdict": "fail", "nodes": nodes}, [])
    headline = page[page.index('id="verdict"') :].split("</div>", 1)[0]
    assert "fail: gpu0001, gpu0002," in headline and "gpu0020 and 980 more (see Nodes)" in headline
    assert "gpu0021" not in headline
