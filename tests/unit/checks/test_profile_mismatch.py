"""Mismatch, not "missing": `validate` on a node whose HCAs and GPUs are named or placed
otherwise than its profile says gives one `profile.mismatch` per difference, both values
named, and no `ib.count`."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.spec import load_spec
from cluster_tool.workflows.collect import run_validate
from tests.conftest import REPO, read_real_output

SPEC = REPO / "examples" / "h100-1su.yml"


def _oem_capture(tmp_path: Path, node: str) -> Path:
    """The OEM HGX H100 of issue 31, as gpud captured it: eight ConnectX-7 named mlx5_0, 1,
    4-9, all Active at 400 (a BlueField-3 bond beside them), GPUs at 19:00.0, 3B:00.0, ...,
    DB:00.0. The built-in profile (a DGX H100) names mlx5_0, 3, 4, 5, 6, 9, 10, 11 with GPUs
    at 1b:00.0, 43:00.0, ... df:00.0."""
    outputs = {
        "hostname": ProbeOutput(0, f"{node}\n"),
        "nvidia-smi-q": ProbeOutput(
            0, read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
        ),
        "ibstat": ProbeOutput(0, read_real_output("ibstat_h100_8xcx7_ndr_ib_all_active.txt")),
        "kernel-log": ProbeOutput(0, "[    0.000000] Linux version 6.1.0-27-amd64\n"),
    }
    save_capture(tmp_path / "cap", {node: HostResult(node, outputs=outputs, probes=tuple(outputs))})
    return tmp_path / "cap"


def test_renamed_hcas_and_moved_gpus_are_mismatches_not_missing(tmp_path: Path) -> None:
    cluster = load_spec(SPEC)
    node = cluster.gpu_nodes()[0].name
    run = run_validate(
        cluster, replay=_oem_capture(tmp_path, node), nodes=[node], dcgm=False, fabric=False
    )
    mine = [f for f in run.report.findings if f.node == node]
    assert [f for f in mine if f.check == "ib.count"] == []
    mismatches = [f for f in mine if f.check == "profile.mismatch"]
    # Read by hand: the profile's rail-1, 6, 7 HCAs (mlx5_3, 10, 11) are not on the node; its
    # mlx5_8, the profile's in-band Ethernet port, is an active InfiniBand port at 400 (mlx5_1
    # and mlx5_7 are InfiniBand as the profile's storage ports are); and each of its eight
    # GPUs sits at another address than the profile's.
    hcas = [f for f in mismatches if f.component and f.component.startswith("mlx5")]
    assert [(f.component, f.expected, f.observed) for f in hcas] == [
        ("mlx5_3", "mlx5_3 at 0000:40:00.0", "absent; outside the layout: mlx5_8"),
        ("mlx5_10", "mlx5_10 at 0000:ce:00.0", "absent; outside the layout: mlx5_8"),
        ("mlx5_11", "mlx5_11 at 0000:dc:00.0", "absent; outside the layout: mlx5_8"),
        ("mlx5_8", "mlx5_8 Ethernet", "mlx5_8 InfiniBand Active"),
    ]
    gpus = [(f.component, f.expected, f.observed) for f in mismatches if f not in hcas]
    assert gpus == [
        ("GPU0", "0000:1b:00.0", "0000:19:00.0"),
        ("GPU1", "0000:43:00.0", "0000:3b:00.0"),
        ("GPU2", "0000:52:00.0", "0000:4c:00.0"),
        ("GPU3", "0000:61:00.0", "0000:5d:00.0"),
        ("GPU4", "0000:9d:00.0", "0000:9b:00.0"),
        ("GPU5", "0000:c3:00.0", "0000:bb:00.0"),
        ("GPU6", "0000:d1:00.0", "0000:cb:00.0"),
        ("GPU7", "0000:df:00.0", "0000:db:00.0"),
    ]
    assert all(f.severity == "error" and "profile discover" in f.message for f in mismatches)
    assert run.exit_code == 1
