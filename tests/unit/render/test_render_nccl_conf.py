"""`render_nccl_conf`: the health check's reference nccl.conf, rendered alone, is the file the
inventory render writes and the nccl role installs."""

from __future__ import annotations

import pytest

from cluster_tool.render.engine import render_files, render_nccl_conf
from cluster_tool.spec import load_spec
from tests.conftest import REPO


@pytest.mark.parametrize("example", ["h100-1su.yml", "h200-4su.yml", "lab.yml"])
def test_nccl_conf_alone_is_the_rendered_inventorys(example: str) -> None:
    cluster = load_spec(REPO / "examples" / example)
    assert render_nccl_conf(cluster) == render_files(cluster)["nccl.conf"]


def test_the_committed_example_inventory_holds_it() -> None:
    cluster = load_spec(REPO / "examples" / "h100-1su.yml")
    rendered = (REPO / "inventory" / "example" / "nccl.conf").read_text(encoding="utf-8")
    assert render_nccl_conf(cluster) == rendered
