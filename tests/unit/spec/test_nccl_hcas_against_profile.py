"""`render` (and `spec check`) refuse a spec whose NCCL HCA names contradict its profile: the
rendered nccl.conf would pin NCCL to names the nodes do not have, and NCCL would run on the
rails it finds."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.cli import main
from tests.conftest import REPO, with_sections

SPEC = (REPO / "examples" / "h100-1su.yml").read_text()
# The OEM HGX H100's names (gpud's ibstat, issue 31): eight CX-7 as mlx5_0, 1, 4-9.
OEM_HCAS = "=mlx5_0,mlx5_1,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9"


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_render_refuses_nccl_hca_names_the_profile_does_not_have(
    tmp_path: Path, capsys: object
) -> None:
    text = with_sections(SPEC, f"nccl:\n  extra_env:\n    NCCL_IB_HCA: '{OEM_HCAS}'\n")
    spec = tmp_path / "c.yml"
    spec.write_text(text)
    out = tmp_path / "inv"
    assert main(["render", str(spec), "-o", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    line = _line(text, "NCCL_IB_HCA")
    located = [e for e in err.splitlines() if e.startswith(f"{spec}:{line}:")]
    # Read against the built-in DGX H100 profile: compute mlx5_0,3,4,5,6,9,10,11; storage and
    # in-band NICs mlx5_1, 2, 7, 8.
    assert any(
        "leaves out compute HCA mlx5_3, mlx5_10, mlx5_11 of profile hgx-h100-8x-ndr: NCCL "
        "would run on 5 of its 8 rails" in e
        for e in located
    ), err
    assert any("selects mlx5_1, mlx5_7, mlx5_8, which profile" in e for e in located), err
    assert all("nccl.extra_env.NCCL_IB_HCA" in e for e in located)


def test_the_profiles_own_names_and_an_exclusion_of_its_nics_pass(tmp_path: Path) -> None:
    for value in (
        "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11",
        "^=mlx5_1,mlx5_2,mlx5_7,mlx5_8",
    ):
        spec = tmp_path / "ok.yml"
        spec.write_text(with_sections(SPEC, f"nccl:\n  extra_env:\n    NCCL_IB_HCA: '{value}'\n"))
        assert main(["spec", "check", str(spec)]) == 0, value
