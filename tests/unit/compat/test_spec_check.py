"""`spec check` holds the spec's version pins against the compatibility matrix: a broken rule
is a `FILE:LINE:COL: path: message [rule: source]` error at the pin to change, exit 2, before
any host is touched; the shipped examples pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cluster_tool.cli import main
from cluster_tool.errors import SpecError
from cluster_tool.spec import load_spec, load_spec_text
from cluster_tool.spec.pins import GPUDIRECT_MODE_DEFAULT, OPEN_MODULES_DEFAULT, spec_problems
from tests.conftest import with_sections

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))
LAB = (ROOT / "examples" / "lab.yml").read_text(encoding="utf-8")


def with_tail(tail: str) -> str:
    """The lab spec with top-level sections added."""
    return with_sections(LAB, tail)


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    return [str(p) for p in info.value.problems]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_examples_keep_every_rule(path: Path) -> None:
    assert spec_problems(load_spec(path)) == []


def test_range_driver_below_what_cuda_needs_is_located_at_the_driver() -> None:
    # CUDA 12.4 GA needs >= 550.54.14 (NVIDIA's table; the runfile is cuda_12.4.0_550.54.14).
    text = with_tail(
        'software:\n  nvidia_driver_branch: "550"\n'
        "  nvidia_driver_version: 550.54.13\n"
        '  cuda_version: "12.4"\n'
    )
    (problem,) = problems_of(text)
    assert problem == (
        f"c.yml:{line_of(text, 'nvidia_driver_version')}:26: software.nvidia_driver_version: "
        "cuda 12.4 needs nvidia_driver >= 550.54.14, not 550.54.13 "
        "[cuda-12-4-min-driver: https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html]"
    )
    load_spec_text(text.replace("550.54.13", "550.54.14"), "c.yml")


def test_a_default_that_breaks_a_rule_is_reported_at_the_pin_the_spec_wrote() -> None:
    # The default driver (570.172.08) is too old for CUDA 12.9 GA (575.51.03).
    text = with_tail('software:\n  cuda_version: "12.9"\n')
    (problem,) = problems_of(text)
    assert problem.startswith(f"c.yml:{line_of(text, 'cuda_version')}:17: software.cuda_version: ")
    assert "cuda 12.9 needs nvidia_driver >= 575.51.03, not 570.172.08 [cuda-12-9-min-driver:" in (
        problem
    )


def test_equal_branch_and_version_disagree() -> None:
    # CUDA 12.2 (>= 535.54.03) keeps the range rule out of it.
    text = with_tail(
        'software:\n  nvidia_driver_branch: "550"\n'
        "  nvidia_driver_version: 535.183.01\n"
        '  cuda_version: "12.2"\n'
    )
    (problem,) = problems_of(text)
    assert problem.startswith(
        f"c.yml:{line_of(text, 'nvidia_driver_branch')}:25: software.nvidia_driver_branch: "
        "nvidia_driver_branch 550 does not match nvidia_driver 535.183.01 in its first number "
        "[driver-branch: https://"
    )
    load_spec_text(text.replace('"550"', '"535"'), "c.yml")


def test_requires_open_modules_when_gpudirect_uses_dmabuf() -> None:
    text = with_tail("ansible_vars:\n  nvidia_driver_open_modules: false\n")
    (problem,) = problems_of(text)
    assert problem == (
        f"c.yml:{line_of(text, 'nvidia_driver_open_modules')}:31: "
        "ansible_vars.nvidia_driver_open_modules: gpudirect_mode dmabuf needs "
        "nvidia_open_modules true, not false "
        "[dmabuf-open-modules: https://github.com/NVIDIA/nccl/pull/682]"
    )
    # The proprietary modules are fine with nvidia_peermem.
    load_spec_text(text + "  gpudirect_rdma_mode: peermem\n", "c.yml")
    # A value only the controller knows (a template) is not guessed at.
    load_spec_text(
        with_tail('ansible_vars:\n  nvidia_driver_open_modules: "{{ site_open }}"\n'), "c.yml"
    )


def test_spec_check_exits_2_with_one_line_per_broken_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        with_tail(
            'software:\n  cuda_version: "12.9"\nansible_vars:\n  nvidia_driver_open_modules: no\n'
        )
    )
    assert main(["spec", "check", str(bad)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{bad}:") and "[cuda-12-9-min-driver: https://" in lines[0]
    assert "ansible_vars.nvidia_driver_open_modules: gpudirect_mode dmabuf" in lines[1]


def test_role_defaults_the_check_assumes_are_the_roles() -> None:
    gdr = yaml.safe_load((ROOT / "roles/gpudirect_rdma/defaults/main.yml").read_text())
    driver = yaml.safe_load((ROOT / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert gdr["gpudirect_rdma_mode"] == GPUDIRECT_MODE_DEFAULT
    assert driver["nvidia_driver_open_modules"] is OPEN_MODULES_DEFAULT


def test_slurm_too_old_for_cgroup_v2_and_nccl_too_old_for_the_plugin_are_located() -> None:
    # SchedMD's packages at 21.08, as the lab runs them (the distribution's Slurm is the OS's
    # own: not pinned).
    assert "  packages: schedmd\n" in LAB
    text = with_tail('software:\n  nccl_version: "2.7.2-1+cuda11.0"\n').replace(
        "  slurm_version: 22.05.8\n", '  slurm_version: "21.08.8"\n'
    )
    problems = problems_of(text)
    assert len(problems) == 2, problems
    nccl = next(p for p in problems if "nccl_version" in p)
    assert nccl.startswith(
        f"c.yml:{line_of(text, 'nccl_version')}:17: software.nccl_version: "
        "sharp_plugin 3.12.0 needs nccl >= 2.7.3, not 2.7.2-1+cuda11.0 [sharp-plugin-min-nccl:"
    )
    slurm = next(p for p in problems if "slurm_version" in p)
    assert slurm.startswith(
        f"c.yml:{line_of(text, 'slurm_version')}:18: software.slurm_version: "
        "needs slurm >= 22.05, not 21.08.8 [slurm-cgroup-v2: https://slurm.schedmd.com/"
    )
