"""The subnet manager in the spec (issue 18, finding 6): OpenSM on `fabric.subnet_manager` with an
optional standby, or an external UFM that the roles leave alone; what reaches the opensm role."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.errors import SpecError
from cluster_tool.render.engine import load_rendered_yaml, render_files
from cluster_tool.spec import load_spec_text

LAB = (Path(__file__).resolve().parents[3] / "examples" / "lab.yml").read_text(encoding="utf-8")
SM = "  subnet_manager: head\n"


def spec_with(*lines: str) -> str:
    assert SM in LAB
    return LAB.replace(SM, SM + "".join(f"  {line}\n" for line in lines), 1)


def group_vars(text: str) -> dict[str, object]:
    files = render_files(load_spec_text(text, "c.yml"))
    return load_rendered_yaml(files["group_vars/all.yml"])


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    return [str(p) for p in info.value.problems]


def test_by_default_the_role_runs_opensm_on_the_subnet_manager_alone() -> None:
    gv = group_vars(LAB)
    assert gv["opensm_mode"] == "opensm"
    assert gv["opensm_hosts"] == ["head"]
    assert gv["opensm_adaptive_routing"] is False


def test_a_standby_comes_second_and_joins_the_subnet_manager_group() -> None:
    text = spec_with("standby_subnet_manager: gpu004")
    gv = group_vars(text)
    assert gv["opensm_hosts"] == ["head", "gpu004"]
    hosts = load_rendered_yaml(render_files(load_spec_text(text, "c.yml"))["hosts.yml"])
    assert set(hosts["all"]["children"]["subnet_manager"]["hosts"]) == {"head", "gpu004"}


def test_sharp_or_the_spec_asks_for_adaptive_routing() -> None:
    assert group_vars(spec_with("adaptive_routing: true"))["opensm_adaptive_routing"] is True
    assert group_vars(spec_with("sharp: true"))["opensm_adaptive_routing"] is True


def test_ufm_mode_reaches_the_role() -> None:
    assert group_vars(spec_with("subnet_manager_mode: ufm"))["opensm_mode"] == "ufm"


def test_under_ufm_no_host_runs_opensm_or_sharps_aggregation_manager() -> None:
    """Issue 29: UFM runs the SM and, with SHARP, the aggregation manager; a host in opensm_hosts
    would get the sharp role's sharp_am beside UFM's."""
    gv = group_vars(
        spec_with("subnet_manager_mode: ufm", "sharp: true", "ufm_url: https://ufm.example.net/")
    )
    assert gv["opensm_hosts"] == []
    assert gv["sharp_enabled"] is True
    assert gv["cluster_ufm_url"] == "https://ufm.example.net/"
    # Without a UFM address the roles only ask sminfo: nothing to render.
    assert "cluster_ufm_url" not in group_vars(spec_with("subnet_manager_mode: ufm"))


def test_a_ufm_address_with_opensm_mode_is_refused_where_it_is_written() -> None:
    text = spec_with("ufm_url: https://ufm.example.net/")
    (problem,) = problems_of(text)
    line = next(i for i, t in enumerate(text.splitlines(), start=1) if "ufm_url" in t)
    assert problem.startswith(f"c.yml:{line}:")
    assert problem.endswith(
        "fabric.ufm_url: only `subnet_manager_mode: ufm` asks a UFM; set it, or remove ufm_url"
    )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            ["standby_subnet_manager: sm02"],
            "fabric.standby_subnet_manager: standby subnet manager sm02 is not a host",
        ),
        (["standby_subnet_manager: head"], "the standby must be another host"),
        (
            ["subnet_manager_mode: ufm", "standby_subnet_manager: gpu004"],
            "an external UFM runs its own standby",
        ),
        (["subnet_manager_mode: ufm-enterprise"], "fabric.subnet_manager_mode"),
    ],
)
def test_a_wrong_subnet_manager_setting_is_refused(lines: list[str], expected: str) -> None:
    problems = problems_of(spec_with(*lines))
    assert len(problems) == 1 and expected in problems[0], problems
