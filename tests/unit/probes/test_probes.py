"""A probe is one class: the command it runs on a node and the reading of what that printed.

Real captures are printed on this machine by stand-in tools that answer only the probe's own
command line, carried back through the one-script-per-node fan-out, and read by the probe.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster_tool.probes import Probe, lines
from cluster_tool.probes.node import HEALTH_PROBES, Ibstat, NvidiaSmiQ
from cluster_tool.remote.fanout import LocalTransport, Target, collect
from tests.conftest import REAL_OUTPUTS, read_real_output


def _stand_in(folder: Path, tool: str, argv: str, capture: str) -> None:
    """`tool` on PATH printing the capture (less its source line) for `argv` only."""
    (folder / f"{tool}.out").write_text(read_real_output(capture))
    script = folder / tool
    script.write_text(
        f'#!/bin/sh\n[ "$*" = "{argv}" ] || {{ echo "unexpected: $*" >&2; exit 2; }}\n'
        f'cat "{folder}/{tool}.out"\n'
    )
    script.chmod(0o755)


def _collected(probe: Probe) -> str:
    result = collect([(Target("gpu001"), (probe,))], LocalTransport())["gpu001"]
    assert result.reachable, result.error
    output = result.outputs[probe.name]
    assert output.rc == 0, output.stderr
    return output.stdout


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_nvidia_smi_q_probe_runs_its_command_and_reads_eight_h100s(tools: Path) -> None:
    capture = "nvidia-smi-q_h100x8_driver535.161.08_full.txt"
    _stand_in(tools, "nvidia-smi", "-q", capture)
    stdout = _collected(NvidiaSmiQ())
    # Carried byte for byte: the probe sees exactly what the tool printed.
    assert stdout == read_real_output(capture)
    report = NvidiaSmiQ().process(lines(stdout))
    # Hand-read from the capture: "Driver Version : 535.161.08", "Attached GPUs : 8".
    assert report.driver_version == "535.161.08"
    assert len(report.gpus) == 8


def test_ibstat_probe_reads_eight_connectx7_and_one_bluefield3(tools: Path) -> None:
    _stand_in(tools, "ibstat", "", "ibstat_h100_8xcx7_ndr_ib_all_active.txt")
    cas = Ibstat().process(lines(_collected(Ibstat())))
    # Hand-read: eight `CA type: MT4129` (ConnectX-7), then one MT41692 (BlueField-3).
    assert [ca.ca_type for ca in cas] == ["MT4129"] * 8 + ["MT41692"]


def test_a_node_without_rdma_devices_has_no_hca_rather_than_unreadable_ibstat() -> None:
    # ibstat prints nothing where no HCA is present: ib.count says so, not ib.driver.
    assert Ibstat().process(lines("")) == []


def test_lines_give_the_text_back_byte_for_byte() -> None:
    text = (REAL_OUTPUTS / "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt").read_text()
    for sample in (text, text.rstrip("\n"), "a\r\nb\x0cc\n\n", ""):
        assert "\n".join(lines(sample)) == sample


def test_every_health_probe_has_its_own_name_and_a_command() -> None:
    # The capture files and the composite script's headers are keyed by the name.
    names = [p.name for p in HEALTH_PROBES]
    assert len(set(names)) == len(names)
    assert all(p.command().strip() for p in HEALTH_PROBES)
