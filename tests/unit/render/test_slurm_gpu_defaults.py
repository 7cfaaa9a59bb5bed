"""Slurm's defaults per GPU (issue 29): with SelectTypeParameters=CR_Core_Memory and no
DefMemPerGPU, a job that asks for GPUs but no --mem is given the node's whole memory, so one
1-GPU job blocks the node's other seven GPUs. Every partition now carries DefCpuPerGPU and
DefMemPerGPU, a GPU's share of its node profile unless the spec sets them; slurm.conf carries
UnkillableStepTimeout (300 s unless the spec says otherwise)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_tool.errors import SpecError
from cluster_tool.render import render_files
from cluster_tool.render.engine import load_rendered_yaml
from cluster_tool.spec import load_spec
from cluster_tool.spec.loader import load_spec_text

ROOT = Path(__file__).resolve().parents[3]
H100 = ROOT / "examples" / "h100-1su.yml"


def _partitions(nodes_conf: str) -> dict[str, dict[str, str]]:
    found = {}
    for line in nodes_conf.splitlines():
        if line.startswith("PartitionName="):
            fields = dict(word.split("=", 1) for word in line.split())
            found[fields["PartitionName"]] = fields
    return found


def _spec(change: dict[str, Any]) -> str:
    data = yaml.safe_load(H100.read_text())
    data["slurm"].update(change)
    return yaml.safe_dump(data, sort_keys=False)


def test_each_partition_gets_a_gpus_share_of_its_node_profile() -> None:
    # hgx-h100-8x-ndr, read from its profile: 2 sockets x 56 cores x 2 threads = 224 CPUs,
    # RealMemory 2000000 MiB, 8 GPUs: 28 CPUs and 250000 MiB per GPU.
    files = render_files(load_spec(H100))
    (gpu,) = _partitions(files["slurm/nodes.conf"]).values()
    assert (gpu["DefCpuPerGPU"], gpu["DefMemPerGPU"]) == ("28", "250000")
    assert "DefMemPerCPU" not in files["slurm/nodes.conf"]  # Slurm refuses both at once
    group_vars = load_rendered_yaml(files["group_vars/all.yml"])
    assert group_vars["slurm_unkillable_step_timeout"] == 300


def test_the_spec_overrides_the_defaults_per_gpu_and_the_unkillable_timeout() -> None:
    text = _spec(
        {"def_mem_per_gpu_mib": 120000, "def_cpu_per_gpu": 16, "unkillable_step_timeout": 600}
    )
    files = render_files(load_spec_text(text, "c.yml"))
    (gpu,) = _partitions(files["slurm/nodes.conf"]).values()
    assert (gpu["DefCpuPerGPU"], gpu["DefMemPerGPU"]) == ("16", "120000")
    assert load_rendered_yaml(files["group_vars/all.yml"])["slurm_unkillable_step_timeout"] == 600


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        # 8 x 250001 MiB is more than the profile's RealMemory of 2000000 MiB.
        ({"def_mem_per_gpu_mib": 250001}, "slurm.def_mem_per_gpu_mib", "RealMemory 2000000 MiB"),
        ({"def_cpu_per_gpu": 29}, "slurm.def_cpu_per_gpu", "224 CPUs"),
        ({"unkillable_step_timeout": 30}, "slurm.unkillable_step_timeout", "60"),
    ],
)
def test_a_default_no_node_could_give_every_gpu_is_a_located_spec_error(
    change: dict[str, Any], field: str, says: str
) -> None:
    text = _spec(change)
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    (problem,) = [str(p) for p in info.value.problems]
    line = next(
        i
        for i, ln in enumerate(text.splitlines(), 1)
        if re.match(rf"\s+{field.split('.')[1]}:", ln)
    )
    assert problem.startswith(f"c.yml:{line}:") and field in problem and says in problem


def test_slurm_conf_carries_the_unkillable_step_timeout() -> None:
    conf = yaml.safe_load((ROOT / "roles/slurm/vars/main.yml").read_text())
    assert conf["__slurm_conf_defaults"]["UnkillableStepTimeout"] == (
        "{{ slurm_unkillable_step_timeout }}"
    )
    assert (
        yaml.safe_load((ROOT / "roles/slurm/defaults/main.yml").read_text())[
            "slurm_unkillable_step_timeout"
        ]
        == 300
    )
