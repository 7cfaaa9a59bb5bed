"""select_gpu_nodes: the one reading of `--nodes` every command shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.errors import UsageError
from cluster_tool.nodes import select_gpu_nodes
from cluster_tool.spec import load_spec
from tests.conftest import REPO

LAB = REPO / "examples" / "lab.yml"


def test_select_nodes_refuses_strangers() -> None:
    cluster = load_spec(LAB)
    assert select_gpu_nodes(cluster, "gpu[002-003]") == ["gpu002", "gpu003"]
    with pytest.raises(UsageError, match="head"):
        select_gpu_nodes(cluster, "head,gpu001")


def test_no_hostlist_is_every_gpu_node_and_an_empty_one_is_none() -> None:
    cluster = load_spec(LAB)
    assert select_gpu_nodes(cluster, None) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert select_gpu_nodes(cluster, "") == []


def test_the_nodes_come_in_the_order_of_the_spec(tmp_path: Path) -> None:
    text = LAB.read_text()
    one_group = "  - hosts: gpu[001-004]\n    profile: lab-h100-8x-hdr\n    address: 10.77.0.11\n"
    assert one_group in text
    two_groups = (
        "  - hosts: gpu[003-004]\n    profile: lab-h100-8x-hdr\n    address: 10.77.0.13\n"
        "  - hosts: gpu[001-002]\n    profile: lab-h100-8x-hdr\n    address: 10.77.0.11\n"
    )
    spec = tmp_path / "lab.yml"
    spec.write_text(text.replace(one_group, two_groups))
    cluster = load_spec(spec)
    assert select_gpu_nodes(cluster, "gpu[001,003]") == ["gpu003", "gpu001"]


def test_strangers_and_bad_hostlists_are_one_line_under_the_option() -> None:
    cluster = load_spec(LAB)
    with pytest.raises(UsageError) as caught:
        select_gpu_nodes(cluster, "gpu[001,009],login7", "--limit")
    assert str(caught.value) == "--limit: not GPU nodes of lab: gpu009,login7"
    with pytest.raises(UsageError, match=r"^--nodes: not a valid hostlist 'gpu\[001-'"):
        select_gpu_nodes(cluster, "gpu[001-")
    with pytest.raises(UsageError, match="expands to 2000000 hosts"):
        select_gpu_nodes(cluster, "gpu[1-2000000]")


def test_hosts_let_through_come_after_the_gpu_nodes_once() -> None:
    cluster = load_spec(LAB)
    picked = select_gpu_nodes(cluster, "head,gpu002", also=["head", "head"])
    assert picked == ["gpu002", "head"]
    assert select_gpu_nodes(cluster, "gpu002", also=["head"]) == ["gpu002"]


@pytest.mark.parametrize(
    "argv",
    [
        ["gate", "--spec", str(LAB), "--nodes", "gpu[001-"],
        ["validate", str(LAB), "--nodes", "gpu[001-"],
        ["validate", str(LAB), "--after-maintenance", "--nodes", "gpu[001-", "--no-dcgm"],
    ],
)
def test_every_command_reads_a_bad_nodes_hostlist_the_same_way(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--nodes: not a valid hostlist 'gpu[001-'" in err
