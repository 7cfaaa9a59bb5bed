"""The large-record builders pause the cyclic collector and always give it back as found."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers.base import collector_paused
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover

LEAF = '"MF0;su1-leaf-r0:MQM9700/U1"'
FABRIC = (
    f'Switch\t36 "S-0002c90200000001"\t\t# {LEAF} enhanced port 0 lid 1 lmc 0\n'
    '[1]\t"H-0002c90300000002"[1](2c90300000003) \t\t# "gpu001 mlx5_0" lid 2 4xNDR\n'
)


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.enable()
    yield
    if not was_on:
        gc.disable()


@pytest.mark.usefixtures("collector_on")
def test_a_parse_gives_the_collector_back_on_success_and_on_error() -> None:
    seen: list[bool] = []

    @collector_paused()
    def build() -> None:
        seen.append(gc.isenabled())

    build()
    assert seen == [False]
    assert parse_ibnetdiscover(FABRIC).switches
    assert gc.isenabled()
    with pytest.raises(ParseError):
        parse_ibnetdiscover("Switch 36 x\n[oops\n")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
@pytest.mark.usefixtures("collector_on")
def test_no_collection_runs_while_a_fabric_is_parsed() -> None:
    # 3,000 CA records: thousands of records kept, where the collector would run many times.
    text = "".join(
        f'Ca\t1 "H-{i:016x}"\t\t# "gpu{i:04d} mlx5_0"\n'
        f'[1]({i + 1:x}) \t"S-0002c90200000001"[{i % 64 + 1}]\t\t# lid {i} lmc 0 {LEAF} '
        "lid 1 4xNDR\n"
        for i in range(1, 3001)
    )
    runs: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        runs.append(phase)

    gc.collect()
    gc.callbacks.append(count)
    try:
        fabric = parse_ibnetdiscover(text)
    finally:
        gc.callbacks.remove(count)
    assert len(fabric.cas) == 3000
    # At most the one that falls due as the collector comes back on; unpaused, one every
    # 700 records kept.
    assert runs.count("start") <= 1, runs


@pytest.mark.usefixtures("collector_on")
def test_nested_pauses_leave_it_on_once_the_outer_one_ends() -> None:
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_someone_turned_off_stays_off() -> None:
    was_on = gc.isenabled()
    gc.disable()
    try:
        parse_ibnetdiscover(FABRIC)
        assert not gc.isenabled()
    finally:
        if was_on:
            gc.enable()
