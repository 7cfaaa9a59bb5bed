"""The fake /sys/class/infiniband tree: the REAL `ibstat` reads it (through an overlay over
/sys/class in a private mount namespace) and the project's ibstat parser reads that."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_lab.faults import inject
from cluster_lab.sim.hw import default_hardware
from cluster_lab.sim.sysfs import write_all_sysfs_trees, write_sysfs_tree
from cluster_tool.parsers.ibstat import parse_ibstat
from tests.conftest import FIXTURES


def test_tree_has_the_files_libibumad_reads(tmp_path: Path) -> None:
    hw = default_hardware("gpu001")
    write_sysfs_tree(hw, tmp_path)
    port = tmp_path / "infiniband" / "mlx5_0" / "ports" / "1"
    assert (port / "rate").read_text() == "200 Gb/sec (4X HDR)\n"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "phys_state").read_text() == "5: LinkUp\n"
    assert (port / "gids" / "0").read_text().startswith("fe80:0000:0000:0000:946d:ae03:00")
    assert (tmp_path / "infiniband_mad" / "abi_version").read_text() == "5\n"
    # rdma-ndd's "%h %d", which the doca_ofed role and the fabric check expect.
    assert (tmp_path / "infiniband" / "mlx5_3" / "node_desc").read_text() == "gpu001 mlx5_3\n"
    assert sorted(p.name for p in (tmp_path / "infiniband").iterdir()) == sorted(
        [h.device for h in hw.hcas] + [n.device for n in hw.other_nics]
    )
    # A second write replaces the first: a healed link must not leave a stale file behind.
    hw.hcas[0].state = "Down"
    write_sysfs_tree(hw, tmp_path)
    assert (port / "state").read_text() == "1: DOWN\n"


def _real_ibstat(tree: Path) -> str:
    script = f"mount -t overlay overlay -o ro,lowerdir={tree}:/sys/class /sys/class && exec ibstat"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting an overlay over /sys/class needs root")
def test_real_ibstat_reports_the_model(tmp_path: Path) -> None:
    assert shutil.which("ibstat"), "infiniband-diags (ibstat) is required on the test machine"
    hw = default_hardware("gpu001")
    hw.hcas[1].state = "Down"  # mlx5_3: cable cut
    hw.hcas[2].width = "1X"  # mlx5_4: degraded to one lane
    cas = {ca.name: ca for ca in parse_ibstat(_real_ibstat(write_sysfs_tree(hw, tmp_path)))}
    assert set(cas) == {h.device for h in hw.hcas} | {n.device for n in hw.other_nics}
    healthy = cas["mlx5_0"]
    assert healthy.ca_type == "MT4129"
    assert healthy.node_guid == "0x" + hw.hcas[0].node_guid
    assert (healthy.ports[0].state, healthy.ports[0].physical_state) == ("Active", "LinkUp")
    assert healthy.ports[0].rate_gbps == 200
    assert healthy.ports[0].link_layer == "InfiniBand"
    cut = cas["mlx5_3"].ports[0]
    assert (cut.state, cut.physical_state) == ("Down", "Disabled")
    assert cas["mlx5_4"].ports[0].rate_gbps == 50
    # The DGX BasePOD guide's storage/in-band ports: port 1 of each dual-port card InfiniBand
    # storage (no storage fabric in the lab: uncabled), port 2 bonded Ethernet on 100 GbE.
    storage = cas["mlx5_1"].ports[0]
    assert (storage.link_layer, storage.state, storage.physical_state) == (
        "InfiniBand",
        "Down",
        "Polling",
    )
    inband = cas["mlx5_2"].ports[0]
    assert (inband.link_layer, inband.state, inband.rate_gbps) == ("Ethernet", "Active", 100)


def test_trees_for_every_node_update_in_place(tmp_path: Path) -> None:
    model = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    written = write_all_sysfs_trees(model, tmp_path)
    assert [p.parent.name for p in written] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    state = tmp_path / "gpu002" / "sysfs-class" / "infiniband" / "mlx5_3" / "ports" / "1" / "state"
    inode = state.stat().st_ino
    inject(model, "link-down", "gpu002", "mlx5_3")
    write_all_sysfs_trees(model, tmp_path)
    assert state.read_text() == "1: DOWN\n"
    assert state.stat().st_ino == inode  # an overlay mounted on the tree keeps seeing it


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting an overlay over /sys/class needs root")
def test_real_ibstat_follows_a_fault_while_mounted(tmp_path: Path) -> None:
    """The lab mounts the tree once at node boot; a fault injected later must still show."""
    model = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    write_all_sysfs_trees(model, tmp_path)
    inject(model, "link-degrade", "gpu001", "mlx5_0", width="2X")
    faulted = tmp_path / "faulted.json"
    faulted.write_text(json.dumps(model))
    tree = tmp_path / "gpu001" / "sysfs-class"
    rewrite = (
        f"import json; from pathlib import Path; "
        f"from cluster_lab.sim.sysfs import write_all_sysfs_trees; "
        f"write_all_sysfs_trees(json.loads(Path('{faulted}').read_text()), Path('{tmp_path}'))"
    )
    script = (
        f"mount -t overlay overlay -o ro,lowerdir={tree}:/sys/class /sys/class && "
        f'ibstat mlx5_0 1 && {sys.executable} -c "{rewrite}" && ibstat mlx5_0 1'
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rates = [line.split(":")[1].strip() for line in done.stdout.splitlines() if "Rate:" in line]
    assert rates == ["200", "100"]


# A DGX H100/H200 by its User Guide: the eight compute ConnectX-7s at the buses the BasePOD guide's
# mlxconfig loop names (18 40 4f 5e 9a c0 ce dc), and ports 1 and 2 of the two dual-port cards in
# slots 1 and 2 (enp41s0f*, enp170s0f*: buses 0x29 and 0xaa).
DGX_H100_RDMA_DEVICES = {
    "mlx5_0": "0000:18:00.0",
    "mlx5_1": "0000:29:00.0",
    "mlx5_2": "0000:29:00.1",
    "mlx5_3": "0000:40:00.0",
    "mlx5_4": "0000:4f:00.0",
    "mlx5_5": "0000:5e:00.0",
    "mlx5_6": "0000:9a:00.0",
    "mlx5_7": "0000:aa:00.0",
    "mlx5_8": "0000:aa:00.1",
    "mlx5_9": "0000:c0:00.0",
    "mlx5_10": "0000:ce:00.0",
    "mlx5_11": "0000:dc:00.0",
}


def test_a_lab_gpu_node_shows_a_dgx_h100s_twelve_rdma_devices_each_at_its_pci_function(
    tmp_path: Path,
) -> None:
    """What /sys/class/infiniband holds on a DGX H100, storage and in-band ports included, and
    each device's `device` link naming its PCI function (what tells them apart by slot)."""
    model = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    write_all_sysfs_trees(model, tmp_path)
    root = tmp_path / "gpu001" / "sysfs-class" / "infiniband"
    found = {d.name: os.path.basename(os.readlink(d / "device")) for d in root.iterdir()}
    assert found == DGX_H100_RDMA_DEVICES
