"""The spec's CUDA, DOCA and HPC-X URLs are per OS release; unset, the render leaves them to the
roles' per-OS defaults (issue 18, finding 3); set, the mirror reaches group_vars as written."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.render import render_files
from cluster_tool.render.engine import load_rendered_yaml
from cluster_tool.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PER_OS = ("cuda_repo_url", "doca_ofed_repo_url", "sharp_hpcx_url")


def _group_vars(spec: Path) -> dict[str, object]:
    return load_rendered_yaml(render_files(load_spec(spec))["group_vars/all.yml"])


def test_the_default_spec_renders_no_per_os_repository() -> None:
    group_vars = _group_vars(EXAMPLES / "h100-1su.yml")
    assert not set(PER_OS) & set(group_vars)
    # The OS-independent ones are still rendered.
    assert group_vars["nccl_tests_repo_url"] == "https://github.com/NVIDIA/nccl-tests.git"


def test_a_mirror_in_the_spec_is_rendered_for_every_node(tmp_path: Path) -> None:
    text = (EXAMPLES / "h100-1su.yml").read_text()
    assert text.rstrip().endswith("slurm_version: 24.05.5"), "the example ends in its software"
    text += (
        "  repositories:\n"
        "    cuda: https://mirror.example.net/cuda/\n"
        "    doca: https://mirror.example.net/doca/\n"
    )
    spec = tmp_path / "h100.yml"
    spec.write_text(text)
    group_vars = _group_vars(spec)
    assert group_vars["cuda_repo_url"] == "https://mirror.example.net/cuda/"
    assert group_vars["doca_ofed_repo_url"] == "https://mirror.example.net/doca/"
    assert "sharp_hpcx_url" not in group_vars
