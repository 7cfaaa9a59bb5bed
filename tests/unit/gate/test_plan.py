"""The ladder's plan: pair rotations that never repeat, and the job scripts Slurm gets."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest

from cluster_tool.gate.plan import (
    NcclTestParams,
    multi_node_job,
    pair_rotation,
    rails_job,
    render_sbatch,
    single_job,
)
from cluster_tool.gate.simulate import node_names
from cluster_tool.gate.thresholds import GateProfile, Rung


@pytest.mark.parametrize("n", [2, 4, 16, 32])
def test_rotations_cover_every_pair_exactly_once(n: int) -> None:
    nodes = node_names(n)
    seen: list[tuple[str, str]] = []
    for r in range(n - 1):
        pairs, left_out = pair_rotation(nodes, r)
        assert left_out is None
        members = [x for p in pairs for x in p]
        assert sorted(members) == sorted(nodes)  # disjoint and complete
        seen += pairs
    assert sorted(seen) == sorted(combinations(sorted(nodes), 2))


def test_odd_fleet_leaves_a_different_node_out_each_rotation() -> None:
    nodes = node_names(7)
    left = set()
    for r in range(7):
        pairs, left_out = pair_rotation(nodes, r)
        assert len(pairs) == 3 and left_out is not None
        assert left_out not in {x for p in pairs for x in p}
        left.add(left_out)
    assert left == set(nodes)


def test_first_rotation_crosses_scalable_units() -> None:
    nodes = node_names(128)
    su_of = {n: i // 32 + 1 for i, n in enumerate(nodes)}
    pairs, _ = pair_rotation(nodes, 0, su_of)
    assert all(su_of[a] != su_of[b] for a, b in pairs)


def _script(job, tmp_path: Path, params: NcclTestParams | None = None) -> str:  # type: ignore[no-untyped-def]
    return render_sbatch(job, params or NcclTestParams(), tmp_path, 8)


def test_pair_job_forces_ring_and_runs_one_rank_per_gpu(tmp_path: Path) -> None:
    params = NcclTestParams(collectives=("all_reduce", "alltoall"), bin_dir="/opt/nccl-tests/build")
    job = multi_node_job("r1-pairs-gpu001-gpu017", Rung.PAIRS, ("gpu001", "gpu017"), params)
    text = _script(job, tmp_path, params)
    assert "#SBATCH --nodelist=gpu001,gpu017" in text
    assert "export NCCL_DEBUG=INFO" in text
    sruns = [ln for ln in text.splitlines() if ln.startswith("srun ")]
    assert len(sruns) == 2
    for line in sruns:
        assert "--mpi=pmix -N 2" in line.replace("--cpu-bind=none ", "")
        # All eight GPUs visible to every rank: nccl-tests drives device localRank.
        assert "--ntasks-per-node=8 --gpus-per-node=8" in line
        assert "--gpus-per-task" not in line
        assert "NCCL_ALGO=Ring" in line
    assert (
        "stdbuf -oL /opt/nccl-tests/build/alltoall_perf -b 8 -e 16G -f 2 -g 1 -n 20 -w 5 -c 1"
        in sruns[1]
    )
    # srun forwards all ranks to the batch host, which alone writes the step's file.
    assert sruns[1].endswith(f" > {tmp_path}/r1-pairs-gpu001-gpu017.alltoall.out 2>&1")


def test_single_job_runs_nvls_on_then_off(tmp_path: Path) -> None:
    text = _script(single_job("gpu003", NcclTestParams()), tmp_path)
    assert "NCCL_NVLS_ENABLE=1" in text and "NCCL_NVLS_ENABLE=0 NCCL_ALGO=Ring" in text
    assert "#SBATCH --nodes=1" in text


def test_rails_job_pins_each_rail_to_its_hca_and_gpu(tmp_path: Path) -> None:
    profile = GateProfile(
        rail_hcas=("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
    )
    text = _script(rails_job("r2-rails-a-b", ("gpu001", "gpu002"), profile), tmp_path)
    sruns = [ln for ln in text.splitlines() if ln.startswith("srun ")]
    assert len(sruns) == 8 and all(ln.endswith("&") for ln in sruns)
    # nvidia-smi's index of the rail's GPU means that GPU only in PCI bus order.
    assert "NCCL_IB_HCA==mlx5_3 CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1" in sruns[1]
    # One rank per node, said twice: the batch's SLURM_NTASKS would override it otherwise.
    assert "-N 2 -n 2 --ntasks-per-node=1" in sruns[1] and "--overlap" in sruns[1]
    assert text.rstrip().endswith("wait")


def test_unknown_collective_in_params_is_refused() -> None:
    with pytest.raises(ValueError, match="collectives"):
        NcclTestParams(collectives=("allreduce",))


def test_on_a_sharp_fabric_the_full_rung_runs_all_reduce_with_and_without_collnet(
    tmp_path: Path,
) -> None:
    # Issue 29: CollNet is per job. The spec with SHARP (h200-4su) gives the gate a full rung
    # whose ring steps run with CollNet off and one more all_reduce with it on; the pairs
    # rung and a fabric without SHARP never turn it on.
    from cluster_tool.gate.from_spec import gate_inputs
    from cluster_tool.spec import load_spec

    examples = Path(__file__).resolve().parents[3] / "examples"
    params = gate_inputs(load_spec(examples / "h200-4su.yml")).params
    assert params.collnet
    full = multi_node_job("r1-full", Rung.FULL, ("gpu001", "gpu002", "gpu003"), params)
    steps = {s.label: dict(s.env) for s in full.steps}
    assert steps["collnet-all_reduce"] == {"NCCL_COLLNET_ENABLE": "1"}  # NCCL picks CollNet
    assert steps["all_reduce"] == {"NCCL_ALGO": "Ring", "NCCL_COLLNET_ENABLE": "0"}
    text = _script(full, tmp_path, params)
    collnet = [ln for ln in text.splitlines() if "collnet-all_reduce.out" in ln]
    assert len(collnet) == 1 and "NCCL_COLLNET_ENABLE=1" in collnet[0]
    pairs = multi_node_job("r1-pairs", Rung.PAIRS, ("gpu001", "gpu002"), params)
    assert "collnet-all_reduce" not in {s.label for s in pairs.steps}
    plain = gate_inputs(load_spec(examples / "h100-1su.yml")).params
    assert not plain.collnet
    full_plain = multi_node_job("r1-full", Rung.FULL, ("gpu001", "gpu002"), plain)
    assert all("NCCL_COLLNET_ENABLE" not in dict(s.env) for s in full_plain.steps)
