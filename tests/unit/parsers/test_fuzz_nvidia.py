"""Hypothesis mutates every NVIDIA, DCGM and kernel-log fixture (real and ours): each parser
returns records or raises ParseError, never anything else."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from cluster_tool.errors import ParseError
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.nvidia_query import parse_query_csv
from cluster_tool.parsers.nvidia_smi import parse_gpu_section, parse_nvidia_smi_q
from cluster_tool.parsers.nvidia_topo import parse_topo_matrix
from cluster_tool.parsers.nvlink import parse_nvlink_status
from tests.unit.parsers._nvidia import fixture, real
from tests.unit.parsers.mutations import mutated

QUERY_FIELDS = (
    "index,name,pci.bus_id,uuid,serial,persistence_mode,pstate,temperature.gpu,memory.total,"
    "memory.used,power.draw,power.limit,fan.speed,ecc.errors.uncorrected.volatile.total,"
    "pcie.link.gen.current,pcie.link.width.current,clocks_event_reasons.active"
)

# (case id, parser, the text it is given). Every NVIDIA/DCGM real capture is here.
CASES: list[tuple[str, Callable[[str], Any], Callable[[], str]]] = [
    *(
        (name, parse_nvidia_smi_q, partial(real, name))
        for name in ("nvidia-smi-q_h100x8_driver535.161.08_full.txt",)
    ),
    *(
        (name, parse_gpu_section, partial(real, name))
        for name in ("nvidia-smi-q_h100_ecc_retired_remapped_section.txt",)
    ),
    *(
        (name, parse_nvidia_smi_q, partial(fixture, name))
        for name in (
            "nvidia-smi-q_h100x2_driver535_failing_gpu.txt",
            "nvidia-smi-q_v100_driver418.67_legacy_layout.txt",
        )
    ),
    *(
        (name, parse_query_csv, partial(fixture, name))
        for name in (
            "nvidia-smi-query_h100x8_csv_header_units.txt",
            "nvidia-smi-query_h100_vbios_ml_engineering.txt",
        )
    ),
    (
        "nvidia-smi-query_h100x8_csv_noheader_nounits.txt",
        partial(parse_query_csv, fields=QUERY_FIELDS),
        partial(fixture, "nvidia-smi-query_h100x8_csv_noheader_nounits.txt"),
    ),
    (
        "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt",
        parse_topo_matrix,
        partial(real, "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt"),
    ),
    *(
        (name, parse_topo_matrix, partial(fixture, name))
        for name in (
            "nvidia-smi_topo-m_h100x4_nv6_spaces_nccl1617.txt",
            "nvidia-smi_topo-m_p100x4_old_mlx5_columns_soc.txt",
        )
    ),
    *(
        (name, parse_nvlink_status, partial(fixture, name))
        for name in (
            "nvidia-smi-nvlink-s_a100x8_gpud.txt",
            "nvidia-smi-nvlink-s_h100x4_inactive_hand_built.txt",
        )
    ),
    (
        "dcgmi_diag_table_dcgm3.3.9_h200_level3style_ramble.txt",
        parse_dcgmi_diag,
        partial(real, "dcgmi_diag_table_dcgm3.3.9_h200_level3style_ramble.txt"),
    ),
    *(
        (name, parse_dcgmi_diag, partial(fixture, name))
        for name in (
            "dcgmi_diag_dcgm3_r2_gpu0_thermal_fail.txt",
            "dcgmi_diag_dcgm4.0.0_r3_all_pass_docs.txt",
            "dcgmi_diag_dcgm4.4.1_b200_pcie_fail.txt",
            "dcgmi_diag_dcgm4.2.3_pcie_internal_error_truncated.txt",
        )
    ),
    *(
        (name, parse_xids, partial(fixture, name))
        for name in ("dmesg_xid79_sxid20034_hgx.txt", "kernel_log_xid_variants_hand_built.txt")
    ),
]


@pytest.mark.parametrize(("name", "parse", "load"), CASES, ids=[c[0] for c in CASES])
def test_mutated_fixture_parses_or_raises_parse_error(
    name: str, parse: Callable[[str], Any], load: Callable[[], str]
) -> None:
    text = load()
    parse(text)  # the unmutated text parses

    # Modest budget: 17 cases on 2 shared cores; the big nvidia-smi -q gets fewer examples.
    examples = 15 if len(text) > 20_000 else 40

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutated(text))
    def check(sample: str) -> None:
        with contextlib.suppress(ParseError):
            parse(sample)

    check()
