"""`nvidia-smi nvlink -s`: link speeds per GPU and the links that are down."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError
from cluster_tool.parsers.nvlink import parse_nvlink_status
from tests.unit.parsers._nvidia import fixture


def test_real_a100_twelve_links_at_25() -> None:
    gpus = parse_nvlink_status(fixture("nvidia-smi-nvlink-s_a100x8_gpud.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert all(g.active_links == 12 and g.inactive_links == 0 for g in gpus)
    assert {link.speed_gbs for g in gpus for link in g.links} == {25.0}


def test_h100_inactive_links_and_all_down_gpu() -> None:
    gpus = parse_nvlink_status(fixture("nvidia-smi-nvlink-s_h100x4_inactive_hand_built.txt"))
    assert [(g.active_links, g.inactive_links) for g in gpus] == [(18, 0), (16, 2), (18, 0), (0, 0)]
    assert [link.link for link in gpus[1].links if not link.active] == [3, 11]
    assert gpus[1].links[3].speed_gbs is None
    assert gpus[0].links[17].speed_gbs == pytest.approx(26.562)
    assert gpus[3].all_inactive is True and gpus[3].links == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "found none"),
        ("\t Link 0: 26.562 GB/s\n", "before link lines"),
        ("GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: fast\n", "Link <n>"),
        ("GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 1: 26.562 GB/s\n", "expected Link 0"),
        ("GPU 0: NVIDIA H100 (UUID: GPU-1)\nGPU 0: NVIDIA H100 (UUID: GPU-1)\n", "twice"),
    ],
)
def test_not_nvlink_status_raises_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvlink_status(text)
