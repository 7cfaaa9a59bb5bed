"""The burn-in's NCCL soak: its samples read back from nccl-tests output, the sag rule on real
busbw figures, the soak job's script, and the duration option.

Figures are hand-read from a real 2-node H100 all_reduce capture (NVIDIA/nccl-tests issue 309,
all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt, out-of-place busbw): the plateau rows
8 GiB 468.46, 16 GiB 469.21, 4 GiB 466.52 GB/s stand for a healthy pair's run-to-run spread;
the same run's 256 MiB row, 392.35 GB/s, and 128 MiB row, 336.29 GB/s, for a pair that lost
bandwidth (0.84x and 0.72x of the plateau)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.errors import UsageError
from cluster_tool.gate.plan import NcclTestParams
from cluster_tool.gate.soak import (
    SagRule,
    SoakSample,
    judge_soak,
    parse_duration,
    plan_soak,
    read_pair_output,
    render_soak_sbatch,
)
from tests.conftest import read_real_output

CAPTURE = "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"
PLATEAU = (468.46, 469.21, 466.52)
SAGGED = (392.35, 336.29)
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


def _soak(
    slow: str | None,
    from_step: int,
    steps: int = 9,
    cycles: int = 3,
    sagged: tuple[float, ...] = SAGGED,
) -> list[SoakSample]:
    """The circle rotations of four nodes, `cycles` samples per pair and step; every pair with
    `slow` in it from `from_step` on gives the sagged figures."""
    plan = plan_soak(NODES, 60.0, message_bytes=8 << 30, cycles=cycles)
    samples = []
    for step in range(steps):
        for pair in plan.rotations[step % len(plan.rotations)]:
            figures = sagged if slow in pair and step >= from_step else PLATEAU
            for cycle in range(cycles):
                busbw = figures[(step + cycle) % len(figures)]
                samples.append(SoakSample(pair, step, cycle, 1000.0 + 10 * step, busbw))
    return samples


def test_the_real_capture_reads_back_as_one_sample_per_row_after_its_marker() -> None:
    text = read_real_output(CAPTURE)
    out = read_pair_output(("gpu001", "gpu002"), "# cluster-tool soak: step 4 at 1700.5\n" + text)
    assert out.failed_steps == []
    by_size = {s.cycle: s for s in out.samples}
    assert len(out.samples) == 32  # the capture's 32 sizes, 8 B .. 16 GiB
    assert by_size[30].busbw == 468.67  # 8 GiB: in-place 468.67 beats out-of-place 468.46
    assert by_size[31].busbw == 469.21
    assert {s.step for s in out.samples} == {4} and {s.at for s in out.samples} == {1700.5}


def test_a_step_that_printed_no_result_is_said_not_silently_skipped() -> None:
    text = "# cluster-tool soak: step 0 at 1.0\nsrun: error: gpu002: task 9: Exited\n"
    out = read_pair_output(("gpu001", "gpu002"), text)
    assert out.samples == [] and out.failed_steps and out.failed_steps[0].startswith("step 0")


def test_a_healthy_soak_names_no_node() -> None:
    assert judge_soak(NODES, _soak(None, 0), SagRule()) == []


def test_the_node_that_slowed_mid_soak_is_named_and_its_partners_are_not() -> None:
    findings = judge_soak(NODES, _soak("gpu003", from_step=3), SagRule())
    assert [(f.check, f.node) for f in findings] == [("burnin.sag", "gpu003")]
    f = findings[0]
    assert f.severity == "error" and "below its own baseline" in f.message
    assert "3 of 3 partner(s)" in (f.observed or "")


def test_a_node_slow_from_the_start_is_named_by_the_fleet_floor() -> None:
    # Steady at 392.35 GB/s: no drop against its own first samples, 0.84x of the others.
    findings = judge_soak(NODES, _soak("gpu003", from_step=0, sagged=SAGGED[:1]), SagRule())
    assert [(f.check, f.node) for f in findings] == [("burnin.sag", "gpu003")]
    assert "below the fleet floor" in findings[0].message
    assert "below its own baseline" not in findings[0].message


def test_one_dip_that_recovers_is_not_a_sag() -> None:
    samples = _soak(None, 0)
    dipped = [
        SoakSample(s.pair, s.step, s.cycle, s.at, SAGGED[1])
        if s.step == 4 and "gpu003" in s.pair and s.cycle == 0
        else s
        for s in samples
    ]
    assert judge_soak(NODES, dipped, SagRule()) == []


def test_two_nodes_alone_cannot_be_told_apart_both_are_named() -> None:
    pair = ("gpu001", "gpu002")
    figures = list(PLATEAU) + list(SAGGED) * 2
    samples = [SoakSample(pair, i, 0, float(i), b) for i, b in enumerate(figures)]
    findings = judge_soak(["gpu001", "gpu002"], samples, SagRule())
    assert sorted((f.check, f.node) for f in findings) == [
        ("burnin.sag", "gpu001"),
        ("burnin.sag", "gpu002"),
    ]
    assert "its only partner was gpu002" in findings[0].message


def test_a_node_with_no_samples_beyond_its_baseline_is_unread() -> None:
    samples = [s for s in _soak(None, 0) if "gpu004" not in s.pair or s.step == 0]
    findings = judge_soak(NODES, samples, SagRule())
    assert [(f.check, f.node) for f in findings] == [("burnin.unread", "gpu004")]


def test_wrong_elements_name_both_nodes_of_the_pair() -> None:
    samples = _soak(None, 0)
    samples[5] = SoakSample(samples[5].pair, samples[5].step, 2, samples[5].at, 468.46, wrong=3)
    findings = judge_soak(NODES, samples, SagRule())
    assert sorted(f.node or "" for f in findings if f.check == "burnin.wrong") == sorted(
        samples[5].pair
    )


def test_the_soak_job_cycles_every_rotation_until_its_deadline(tmp_path: Path) -> None:
    plan = plan_soak(NODES, 1800.0, message_bytes=8 << 30, cycles=5)
    assert len(plan.rotations) == 3  # 4 nodes: 3 rotations, every pair once
    text = render_soak_sbatch(plan, NcclTestParams(), tmp_path, 8)
    assert "#SBATCH --nodelist=gpu001,gpu002,gpu003,gpu004" in text
    assert "deadline=$(( $(date +%s) + 1800 ))" in text
    assert "-b 8589934592 -e 8589934592" in text and " -N 5" in text and "-c 1" in text
    assert text.count("srun --mpi=pmix") == 6  # 3 rotations x 2 pairs
    assert "-w gpu001,gpu002 --ntasks-per-node=8 --gpus-per-node=8" in text
    assert str(tmp_path / "soak.gpu001+gpu002.out") in text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20s", 20.0), ("30m", 1800.0), ("4h", 14400.0), ("1h30m", 5400.0), ("90", 90.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0", "5x", "-3m", "1h 30m"])
def test_a_bad_duration_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--burn-in"):
        parse_duration(text)
