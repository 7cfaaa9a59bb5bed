"""A probe is one class: the command it runs on a node and the reading of what that printed.
Each probe's readings are tested as data (test_probe_cases.py, tests/fixtures/probes/); here,
what holds for every probe."""

from __future__ import annotations

from cluster_tool.probes import lines
from cluster_tool.probes.node import HEALTH_PROBES
from tests.conftest import REAL_OUTPUTS


def test_lines_give_the_text_back_byte_for_byte() -> None:
    text = (REAL_OUTPUTS / "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt").read_text()
    for sample in (text, text.rstrip("\n"), "a\r\nb\x0cc\n\n", ""):
        assert "\n".join(lines(sample)) == sample


def test_every_health_probe_has_its_own_name_and_a_command() -> None:
    # The capture files and the composite script's headers are keyed by the name.
    names = [p.name for p in HEALTH_PROBES]
    assert len(set(names)) == len(names)
    assert all(p.command().strip() for p in HEALTH_PROBES)
