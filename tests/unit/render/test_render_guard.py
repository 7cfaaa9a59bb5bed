"""Issue 32: every rendered value is checked, as the text it became, against the grammar of the
file it lands in; typed fields are no wider than their target (an IPv6 zone is an interface)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import jinja2
import pytest

from cluster_tool.cli import main
from cluster_tool.errors import SpecError
from cluster_tool.render import guards
from cluster_tool.render.engine import RenderError, _environment, load_rendered_yaml, render_files
from cluster_tool.spec import load_spec_text

LAB = (Path(__file__).resolve().parents[3] / "examples" / "lab.yml").read_text(encoding="utf-8")
DOMAIN = "  domain: lab.internal\n"
# The issue's value: a time source replaced, chronyc opened to any host, clock steps at will.
INJECTION = "fe80::1%eth0\nserver 203.0.113.66 iburst\ncmdallow all\nmakestep 1 -1"


def _spec_with(line: str) -> str:
    assert DOMAIN in LAB
    return LAB.replace(DOMAIN, DOMAIN + f"  {line}\n", 1)


def test_an_ipv6_zone_that_is_no_interface_name_is_a_located_spec_error() -> None:
    value = INJECTION.replace("\n", "\\n")
    with pytest.raises(SpecError) as info:
        load_spec_text(_spec_with(f'time_servers: ["{value}"]'), "c.yml")
    (problem,) = info.value.problems
    assert problem.path == "management.time_servers[0]"
    assert "the zone of an IPv6 address is an interface name" in problem.message


def test_spec_check_refuses_the_chrony_injection_with_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    spec = tmp_path / "c.yml"
    value = INJECTION.replace("\n", "\\n")
    spec.write_text(_spec_with(f'time_servers: ["{value}"]'))
    assert main(["spec", "check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "management.time_servers[0]" in err and "Traceback" not in err


def test_a_zone_that_is_an_interface_reaches_chrony_as_written() -> None:
    cluster = load_spec_text(_spec_with('time_servers: ["fe80::1%eth0", "fd00::7b"]'), "c.yml")
    group_vars = load_rendered_yaml(render_files(cluster)["group_vars/all.yml"])
    assert group_vars["common_timesync_upstream_servers"] == ["fe80::1%eth0", "fd00::7b"]


def test_a_typed_value_that_would_add_chrony_directives_is_refused_at_render() -> None:
    # A Cluster made in code (the lab makes one) skips the spec's validation: the guard, which
    # reads the value's text where it is written, still refuses it, and nothing is written.
    cluster = load_spec_text(LAB, "c.yml")
    hostile = ipaddress.IPv6Address(INJECTION)
    management = cluster.management.model_copy(update={"time_servers": [hostile]})
    with pytest.raises(RenderError, match=r"chrony\.conf: it holds a line break"):
        render_files(cluster.model_copy(update={"management": management}))


def test_a_literal_ansible_var_that_would_add_a_systemd_setting_is_refused() -> None:
    spec = LAB + (
        'ansible_vars:\n  doca_ofed_node_description_format: "%h %d\\nExecStartPre=/bin/sh -c id"\n'
    )
    with pytest.raises(RenderError, match="systemd unit: it holds a line break"):
        render_files(load_spec_text(spec, "c.yml"))
    template = LAB + "ansible_vars:\n  doca_ofed_node_description_format: '{{ site_format }}'\n"
    assert "group_vars/all.yml" in render_files(load_spec_text(template, "c.yml"))


def test_a_value_a_template_writes_without_a_filter_meets_its_files_grammar() -> None:
    env = _environment()
    env.loader = jinja2.DictLoader(
        {
            "slurm/x.conf.j2": "NodeName={{ v }}\n",
            "nccl.conf.j2": "{{ v }}\n",
            "x.yml.j2": "key: {{ v }}\n",
            "nccl-tests/x.sbatch.j2": "echo {{ v }}\n",
        }
    )
    assert env.get_template("slurm/x.conf.j2").render(v="gpu[001-004]") == "NodeName=gpu[001-004]\n"
    for name, value in (
        ("slurm/x.conf.j2", "gpu001 Include=/tmp/x"),
        ("slurm/x.conf.j2", "gpu001#"),
        ("nccl.conf.j2", "NCCL_DEBUG=INFO\nLD_PRELOAD=/x.so"),
        ("x.yml.j2", "a # b"),
        ("x.yml.j2", "a: b"),
        ("nccl-tests/x.sbatch.j2", "a; reboot"),
        ("nccl-tests/x.sbatch.j2", "$(id)"),
    ):
        with pytest.raises(RenderError, match="cannot be written into"):
            env.get_template(name).render(v=value)
    assert env.get_template("x.yml.j2").render(v=3) == "key: 3\n"


ACCEPTED = {
    "slurm": ["gpu[001-004]", "/dev/nvidia[0-3]", '"QM 9700 (r1)"', "gpu:h100:8"],
    "chrony": ["ntp1.site.example", "10.0.0.123", "fe80::1%eth0", "10.10.0.0/16"],
    "nccl": ["NCCL_IB_HCA==mlx5_0,mlx5_1", "NCCL_DEBUG_FILE=/var/log/%h.%p #1"],
    "shell": ["/opt/nccl-tests/build/all_reduce_perf", "'$(touch x)'", "'it'\"'\"'s'"],
    "sbatch": ["nccl-all_reduce-%j.out", "gpu"],
    "yaml": ["plain", "gpu001", "/opt/x"],
    "systemd": ["%%h %%d", "/usr/bin/x --y=z"],
    "comment": ["Rendered by cluster-tool from the cluster spec; edit the spec and re-render."],
}
REFUSED = {
    "slurm": ["a\nb", "a#b", "a b", 'a"b', "a\\b", '"a"b"', "a\u2028b"],
    "chrony": ["a\nb", "1.2.3.4 iburst", "#x", "!x", "", "a\tb", "x\u2029cmdallow all"],
    "nccl": ["NCCL_X=a\nLD_PRELOAD=/x.so", "#NCCL_X=1", "1X=a", "NCCL_X=a\rb"],
    "shell": ["a; reboot", "$(id)", "`id`", "'a", "a b", "a\nb", "'a\nb'"],
    "sbatch": ["a b", "a\nb", "x;y", "'q'"],
    "yaml": ["a # b", "a: b", "[1, 2]", "a\nb", "*alias", "{a: 1}", "'12'"],
    "systemd": ["a\nExecStartPre=/bin/sh -c id", 'a"b', "a\\nb", "%h", "#x", "[Service]"],
    "comment": ["a\nrm -rf /", "a\x1b[2Jb", "a\rb"],
}


@pytest.mark.parametrize(("fmt", "text"), [(f, t) for f, ts in ACCEPTED.items() for t in ts])
def test_each_guard_passes_values_its_file_reads_as_one_value(fmt: str, text: str) -> None:
    assert guards.check(fmt, text) == text


@pytest.mark.parametrize(("fmt", "text"), [(f, t) for f, ts in REFUSED.items() for t in ts])
def test_each_guard_refuses_a_line_break_comment_or_directive_start(fmt: str, text: str) -> None:
    with pytest.raises(guards.UnsafeValue, match="cannot be written into"):
        guards.check(fmt, text, "v")


@pytest.mark.parametrize(
    ("text", "value"), [('"a # b"', "a # b"), ('!unsafe "{{ x }}"', "{{ x }}")]
)
def test_the_yaml_guard_takes_a_quoted_scalar_that_reads_back_as_its_value(
    text: str, value: str
) -> None:
    assert guards.check("yaml", text, value=value) == text
    with pytest.raises(guards.UnsafeValue):
        guards.check("yaml", text, value=value + "x")


def test_every_format_the_issue_names_has_a_guard() -> None:
    assert {"slurm", "chrony", "nccl", "shell", "yaml", "systemd"} <= set(guards.FORMATS)
