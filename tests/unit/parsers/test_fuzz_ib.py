"""Hypothesis mutates every IB and nccl-tests fixture: each parser returns records or raises
ParseError, never anything else (no IndexError, no ValueError, no KeyError)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from cluster_tool.errors import ParseError
from cluster_tool.parsers.ibcounters import parse_ibqueryerrors, parse_perfquery
from cluster_tool.parsers.iblinkinfo import parse_iblinkinfo
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.parsers.ibstat import parse_ibstat, parse_ibstat_p, parse_ibstatus
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from tests.conftest import FIXTURES, read_real_output
from tests.unit.parsers.mutations import mutated

IB = FIXTURES / "parsers" / "ib"
NCCL = FIXTURES / "parsers" / "nccl"

_QM9700 = "ibnetdiscover_qm9700_ndr200_hostname_mlx5_redacted.txt"

CASES: list[tuple[str, Callable[[str], Any], Callable[[], str]]] = [
    *(
        (name, parse_ibstat, lambda n=name: read_real_output(n))
        for name in (
            "ibstat_h100_8xcx7_ndr_ib_all_active.txt",
            "ibstat_h100_ib_active_some_eth_down.txt",
            "ibstat_h100_roce_ports_down_polling_disabled.txt",
        )
    ),
    (
        "ibstat_p_h100_8xcx7.txt",
        parse_ibstat_p,
        lambda: (IB / "ibstat_p_h100_8xcx7.txt").read_text(),
    ),
    # The capture holds an ibnetdiscover excerpt (cut at "...omitted") and an ibstatus one.
    (_QM9700, parse_ibnetdiscover, lambda: read_real_output(_QM9700).split("...omitted")[0]),
    (
        _QM9700 + " (ibstatus)",
        parse_ibstatus,
        lambda: read_real_output(_QM9700).split("NDR200 port ----\n", 1)[1],
    ),
    *(
        (path.name, parse_ibnetdiscover, lambda p=path: p.read_text())
        for path in (IB / "ibnetdiscover_ibsim_hdr.txt", IB / "ibsim_net_lab_hdr.net")
    ),
    *(
        (path.name, parse_iblinkinfo, lambda p=path: p.read_text())
        for path in sorted(IB.glob("iblinkinfo_*.txt"))
    ),
    *(
        (path.name, parse_perfquery, lambda p=path: p.read_text())
        for path in sorted(IB.glob("perfquery_*.txt"))
    ),
    *(
        (path.name, parse_ibqueryerrors, lambda p=path: p.read_text())
        for path in sorted(IB.glob("ibqueryerrors_*.txt"))
    ),
    *(
        (name, parse_nccl_tests, lambda n=name: read_real_output(n))
        for name in (
            "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt",
            "all_reduce_perf_h100_96gpu_claimed64_sharp_coreweave_readme_excerpt.txt",
            "all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt",
        )
    ),
    *(
        (path.name, parse_nccl_tests, lambda p=path: p.read_text())
        for path in sorted(NCCL.glob("*.txt"))
    ),
]


@pytest.mark.parametrize(("name", "parse", "load"), CASES, ids=[c[0] for c in CASES])
def test_mutated_fixture_parses_or_raises_parse_error(
    name: str, parse: Callable[[str], Any], load: Callable[[], str]
) -> None:
    text = load()
    expected_type = type(parse(text))  # the fixture itself parses: the fuzz starts from records

    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutated(text))
    def check(mutated: str) -> None:
        try:
            records = parse(mutated)
        except ParseError:
            return
        assert type(records) is expected_type

    check()


def test_every_fixture_is_fuzzed() -> None:
    names = {c[0] for c in CASES}
    for folder in (IB, NCCL):
        for path in folder.iterdir():
            if path.suffix in (".txt", ".net"):
                assert path.name in names, f"{path.name} is not fuzzed"


HUGE = "9" * 5000  # int() refuses more than 4,300 digits with a ValueError


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_ibstat, f"CA 'mlx5_0'\n\tPort {HUGE}:\n"),
        (parse_ibnetdiscover, f'Switch\t{HUGE} "S-01"\n'),
        (parse_ibnetdiscover, f'Switch\t3 "S-01"\n[{HUGE}]\t"S-02"[1]\n'),
        (parse_iblinkinfo, f'CA: h:\n  0x1  {HUGE}  1[  ] ==(  Down/ Polling)==>  [  ] "" ( )\n'),
        (parse_perfquery, f"# Port counters: Lid {HUGE} port 0\n"),
        (parse_ibqueryerrors, f'Errors for "h"\n   GUID 0x1 port 1: [PortRcvErrors == {HUGE}]\n'),
        (parse_nccl_tests, f"#  Rank {HUGE} Group 0 Pid 1 on h device 0 [0x19] NVIDIA H100\n"),
        (parse_nccl_tests, f"# Out of bounds values : {HUGE} OK\n"),
    ],
)
def test_absurdly_long_numbers_are_parse_errors(parse: Callable[[str], Any], text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)
