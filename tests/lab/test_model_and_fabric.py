"""The lab's hardware model and the ibsim net file built from it, without bringing a lab up
(no root needed): the fabric is cabled exactly as the rendered plan says."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_lab import fabric
from cluster_lab import model as hw
from cluster_lab.config import LabConfig
from cluster_lab.topology import build_model, load_plan
from cluster_tool.errors import UsageError
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from tests.conftest import REPO


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return load_plan(REPO / "examples" / "lab.yml", tmp_path_factory.mktemp("inv") / "inventory")


def test_model_holds_every_planned_hca_on_its_leaf_port(plan) -> None:  # type: ignore[no-untyped-def]
    model = build_model(plan, "lab-test")
    assert [n.name for n in model.nodes] == ["head", "gpu001", "gpu002", "gpu003", "gpu004"]
    assert model.node("head").hcas == [] and model.node("head").role == "head"
    assert len(model.node("gpu001").gpus) == 8
    for row in plan.cabling:
        hca = model.hca(row.node, row.hca)
        assert (hca.leaf, hca.leaf_port, hca.rail) == (row.leaf, row.leaf_port, row.rail)
        assert hca.node_description == f"{row.node} {row.hca}"
    lids = [s.lid for s in model.switches] + [h.port.lid for n in model.nodes for h in n.hcas]
    assert len(lids) == len(set(lids)) == 10 + 32
    guids = [h.node_guid for n in model.nodes for h in n.hcas]
    assert len(set(guids)) == 32
    # Stable identities: a rebuilt lab shows the same GUIDs and GPU UUIDs.
    again = build_model(plan, "lab-test")
    assert again.model_dump() == model.model_dump()


def test_gpu_nodes_carry_the_storage_and_inband_ports_off_the_compute_fabric(plan) -> None:  # type: ignore[no-untyped-def]
    """A lab GPU node has the non-compute ports of a DGX H100 (the two dual-port ConnectX-7s of
    slots 1 and 2, set as the DGX BasePOD guide sets them), and none is cabled to a rail leaf."""
    model = build_model(plan, "lab-test")
    for node in (n for n in model.nodes if n.role == "gpu"):
        ports = {(n.device, n.pci, n.link_layer, n.state) for n in node.other_nics}
        assert ports == {
            ("mlx5_1", "0000:29:00.0", "InfiniBand", "Down"),
            ("mlx5_2", "0000:29:00.1", "Ethernet", "Active"),
            ("mlx5_7", "0000:aa:00.0", "InfiniBand", "Down"),
            ("mlx5_8", "0000:aa:00.1", "Ethernet", "Active"),
        }
        assert len(node.hcas) == 8
    assert model.node("head").other_nics == []
    cabled = {row.hca for row in plan.cabling}
    assert not cabled & {"mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"}
    net = parse_ibnetdiscover(fabric.net_file(model))
    assert not [u for u in net.ca_uplinks() if u.ca_description.split()[-1] in ("mlx5_1", "mlx5_7")]


def test_net_file_is_the_plan_as_ibnetdiscover_would_show_it(plan) -> None:  # type: ignore[no-untyped-def]
    model = build_model(plan, "lab-test")
    net = parse_ibnetdiscover(fabric.net_file(model))
    uplinks = {u.ca_description: u for u in net.ca_uplinks()}
    assert len(uplinks) == 32
    for row in plan.cabling:
        uplink = uplinks[f"{row.node} {row.hca}"]
        assert uplink.switch_port == row.leaf_port
        assert (uplink.width, uplink.speed) == (4, "HDR")
    ports = {(p.switch_description, p.port): p for p in net.switch_ports()}
    for link in plan.switch_links:
        port = ports[(f"MF0;{link.leaf}:MQM8700/U1", link.leaf_port)]
        assert (port.peer_description, port.peer_port) == (
            f"MF0;{link.spine}:MQM8700/U1",
            link.spine_port,
        )


def test_net_file_follows_faults_in_the_model(plan) -> None:  # type: ignore[no-untyped-def]
    model = build_model(plan, "lab-test")
    model.hca("gpu001", "mlx5_0").port.width = "1X"
    model.hca("gpu002", "mlx5_0").port.speed = "EDR"
    model.hca("gpu003", "mlx5_0").port.phys_state = "Polling"
    model.spine_links[0].up = False
    net = parse_ibnetdiscover(fabric.net_file(model))
    uplinks = {u.ca_description: u for u in net.ca_uplinks()}
    assert (uplinks["gpu001 mlx5_0"].width, uplinks["gpu001 mlx5_0"].speed) == (1, "HDR")
    assert (uplinks["gpu002 mlx5_0"].width, uplinks["gpu002 mlx5_0"].speed) == (4, "EDR")
    assert "gpu003 mlx5_0" not in uplinks
    cut = model.spine_links[0]
    leaf = next(s for s in net.switches if s.description == f"MF0;{cut.leaf}:MQM8700/U1")
    assert leaf.port(cut.leaf_port) is None


def test_model_file_is_replaced_atomically_and_keeps_extra_keys(tmp_path: Path, plan) -> None:  # type: ignore[no-untyped-def]
    model_dir = tmp_path / "model"
    hw.save(model_dir, build_model(plan, "lab-test"))

    def extend(m: hw.HardwareModel) -> None:
        # Part 2 adds keys the schema does not name; they survive every later save.
        m.node("gpu002").gpus[3].xids = [79]
        m.node("gpu002").straggler_factor = 0.5  # type: ignore[attr-defined]

    saved = hw.update(model_dir, extend)
    assert saved.generation == 2
    back = hw.load(model_dir)
    assert back.node("gpu002").gpus[3].xids == [79]
    assert back.node("gpu002").model_extra == {"straggler_factor": 0.5}
    assert sorted(p.name for p in model_dir.iterdir()) == ["model.json"]


def test_config_rejects_names_that_would_collide_or_overflow() -> None:
    with pytest.raises(UsageError, match="prefix"):
        LabConfig(prefix="far-too-long")
    with pytest.raises(UsageError, match="longer than 15"):
        LabConfig(bridge="a-very-long-bridge-name")
    config = LabConfig(prefix="ab1")
    assert (config.netns("gpu001"), config.veth("gpu001")) == ("ab1-gpu001", "ab1gpu001")
    assert (config.host_address, config.ibsim_address) == ("10.77.0.1", "10.77.0.254")
