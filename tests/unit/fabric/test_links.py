"""The rail × node link matrix the report draws: a swap reaches it on both HCAs through the
finding's typed `swapped` field, and findings.json keeps the `component` text beside it."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from cluster_tool.checks.fabric import check_fabric
from cluster_tool.fabric.links import link_matrix
from cluster_tool.fabric.plan import cabling_plan, plan_for, switch_links
from cluster_tool.findings import Finding, Report
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.report.html import link_matrix_html
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText


@pytest.fixture(scope="module")
def one_su() -> Cluster:
    return load_spec(REPO / "examples" / "h100-1su.yml")


class _Cells(HTMLParser):
    """(node, rail) -> (css class, text) of every cell of the report's link matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, int], tuple[str, str]] = {}
        self._open: tuple[tuple[str, int], str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        got = dict(attrs)
        title = got.get("title")
        if tag == "td" and title:  # "gpu017 mlx5_3 rail 1: <detail>"
            node = title.split()[0]
            rail = int(title.split(" rail ", 1)[1].split(":", 1)[0])
            self._open = ((node, rail), got.get("class") or "")

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            key, css = self._open
            self.cells[key] = (css, data)
            self._open = None


def matrix_cells(links: list[dict[str, object]]) -> dict[tuple[str, int], tuple[str, str]]:
    parser = _Cells()
    parser.feed(link_matrix_html(links))
    return parser.cells


def swapped_fabric(cluster: Cluster) -> list[Finding]:
    fabric = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster))
    # The profile's compute HCAs in rail order are mlx5_0,3,4,5,6,9,10,11 (the eight NICs PIX
    # to a GPU in the nvidia-smi topo -m capture): mlx5_3 is rail 1, mlx5_4 rail 2.
    fabric.swap("gpu017", "mlx5_3", "mlx5_4")
    return check_fabric(cluster, parse_ibnetdiscover(fabric.text()))


def test_a_swap_the_wiring_check_finds_is_two_swapped_cells_in_the_reports_matrix(
    one_su: Cluster,
) -> None:
    findings = swapped_fabric(one_su)
    links = link_matrix(plan_for(one_su), ["gpu016", "gpu017"], findings, fabric_checked=True)
    cells = matrix_cells(links)
    assert len(cells) == 16  # two nodes x eight rails
    assert cells[("gpu017", 1)] == ("fault", "swapped")
    assert cells[("gpu017", 2)] == ("fault", "swapped")
    rest = {v for k, v in cells.items() if k not in {("gpu017", 1), ("gpu017", 2)}}
    assert rest == {("up", "up")}


def test_the_swap_in_findings_json_keeps_its_component_text_and_gains_the_pair(
    one_su: Cluster,
) -> None:
    (finding,) = swapped_fabric(one_su)
    data = json.loads(json.dumps(Report.from_findings([finding]).to_json()))
    (written,) = data["findings"]
    assert written["component"] == "mlx5_3,mlx5_4"
    assert written["swapped"] == ["mlx5_3", "mlx5_4"]
    assert {"check", "severity", "node", "component", "expected", "observed", "message"} <= set(
        written
    )
    # A reader of findings.json gets the typed pair back.
    assert Finding.model_validate(written).swapped == ("mlx5_3", "mlx5_4")


def test_the_matrix_marks_the_hcas_a_fabric_finding_names_and_is_unknown_unchecked() -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    swap = Finding(
        check="fabric.swapped",
        node="gpu002",
        component="mlx5_0,mlx5_3",
        swapped=("mlx5_0", "mlx5_3"),
        message="gpu002: mlx5_0 and mlx5_3 are swapped",
    )
    down = Finding(
        check="fabric.link-down",
        node="gpu001",
        component="mlx5_0",
        message="gpu001 mlx5_0: no link",
    )
    plan = plan_for(cluster)
    # Rails come from the profile (PCI order), not the mlx5 index: mlx5_3 is rail 1 here.
    links = link_matrix(plan, ["gpu001", "gpu002"], [swap, down], fabric_checked=True)
    assert len(links) == 16
    bad = {(x["node"], x["rail"]): x["state"] for x in links if x["state"] != "up"}
    assert bad == {("gpu002", 0): "swapped", ("gpu002", 1): "swapped", ("gpu001", 0): "link-down"}
    unknown = link_matrix(plan, ["gpu001"], [], fabric_checked=False)
    assert {x["state"] for x in unknown} == {"unknown"}
