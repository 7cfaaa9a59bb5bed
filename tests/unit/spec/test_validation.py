"""A bad spec gets every problem as `FILE:LINE:COL: field.path: what is wrong`."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.errors import SpecError
from cluster_tool.spec import load_spec, load_spec_text

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
LAB = (EXAMPLES / "lab.yml").read_text(encoding="utf-8")


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    return [str(p) for p in info.value.problems]


def edited(old: str, new: str, text: str = LAB) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_examples_are_valid() -> None:
    for path in sorted(EXAMPLES.glob("*.yml")):
        load_spec(path)


def test_yaml_syntax_error_is_located() -> None:
    text = edited("  interface: eth0\n", "  interface: [eth0\n")
    (problem,) = problems_of(text)
    assert problem.startswith(f"c.yml:{line_of(text, 'interface') + 1}:")
    assert "YAML" in problem


def test_unknown_key_points_at_the_key_and_suggests() -> None:
    text = edited("  su_size: 4\n", "  su_sise: 4\n")
    (problem,) = problems_of(text)
    line = line_of(text, "su_sise")
    assert problem == (
        f"c.yml:{line}:3: fabric.su_sise: unknown key 'su_sise'; did you mean 'su_size'?"
    )


def test_wrong_type_points_at_the_value() -> None:
    text = edited("  rails: 8\n", "  rails: eight\n")
    (problem,) = problems_of(text)
    line = line_of(text, "rails: eight")
    assert problem.startswith(f"c.yml:{line}:10: fabric.rails: ")
    assert "integer" in problem and "'eight'" in problem


def test_bad_hostlist_is_located() -> None:
    text = edited("hosts: gpu[001-004]", "hosts: gpu[001-004")
    (problem,) = problems_of(text)
    line = line_of(text, "gpu[001-004")
    assert problem.startswith(f"c.yml:{line}:12: nodes[1].hosts: not a valid hostlist")


def test_literal_password_is_refused() -> None:
    text = edited("password: {env: LAB_BMC_PASSWORD}", "password: hunter2")
    (problem,) = problems_of(text)
    line = line_of(text, "hunter2")
    assert problem.startswith(f"c.yml:{line}:15: bmc.credentials.password: a literal secret")
    assert "hunter2" not in problem


def test_missing_key_points_at_its_parent() -> None:
    text = edited("  subnet_manager: head\n", "")
    (problem,) = problems_of(text)
    assert problem == (
        f"c.yml:{line_of(text, 'fabric:')}:1: fabric.subnet_manager: missing required key "
        "'subnet_manager'"
    )


def test_duplicate_key_is_reported() -> None:
    text = edited("  rails: 8\n", "  rails: 8\n  rails: 8\n")
    (problem,) = problems_of(text)
    assert problem == f"c.yml:{line_of(text, 'rails') + 1}:3: fabric.rails: duplicate key 'rails'"


def test_every_structural_problem_is_reported_at_once() -> None:
    text = edited("  rails: 8\n", "  rails: eight\n")
    text = edited("  su_size: 4\n", "  su_size: 4\n  colour: blue\n", text)
    text = edited("hosts: gpu[001-004]", "hosts: gpu[001-", text)
    problems = problems_of(text)
    assert len(problems) == 3
    # Sorted by line, like a compiler.
    lines = [int(p.split(":")[1]) for p in problems]
    assert lines == sorted(lines)


CROSS_FIELD = [
    pytest.param(
        ("  rails: 8\n", "  rails: 4\n"),
        "rails: 4",
        "fabric.rails: 4 rails but profile lab-h100-8x-hdr has 8 compute HCAs",
        id="rails-vs-hcas",
    ),
    pytest.param(
        ("  su_size: 4\n", "  su_size: 24\n"),
        "su_size: 24",
        "fabric.su_size: an SU of 24 nodes plus 24 up-ports needs 48 leaf ports; a leaf has 40",
        id="su-does-not-fit-leaf",
    ),
    pytest.param(
        ("  spines: 2\n", "  spines: 3\n"),
        "spines: 3",
        "fabric.spines: 4 up-ports per leaf do not divide evenly over 3 spines",
        id="uplinks-do-not-divide",
    ),
    pytest.param(
        ("  spines: 2\n", "  spines: 2\n  spine_ports: 8\n"),
        "spines: 2",
        "fabric.spines: 8 leaves x 4 up-ports over 2 spines need 16 ports per spine; a spine has 8",
        id="spine-ports",
    ),
    pytest.param(
        ("  controller: head\n", "  controller: head2\n"),
        "controller: head2",
        "slurm.controller: controller head2 is not a host of this cluster",
        id="controller-missing",
    ),
    pytest.param(
        ("  subnet_manager: head\n", "  subnet_manager: sm01\n"),
        "subnet_manager: sm01",
        "fabric.subnet_manager: subnet manager sm01 is not a host of this cluster",
        id="subnet-manager-missing",
    ),
    pytest.param(
        ("    address: 10.77.0.11\n", "    address: 10.77.0.10\n"),
        None,
        "nodes[1].address: 10.77.0.10 (gpu001) is already head's address",
        id="duplicate-address",
    ),
    pytest.param(
        ("    address: 10.77.0.11\n", "    address: 10.77.0.253\n"),
        "10.77.0.253",
        "nodes[1].address: 4 addresses from 10.77.0.253 do not fit in the management "
        "network 10.77.0.0/24",
        id="address-outside-network",
    ),
    pytest.param(
        ("  - hosts: head\n", "  - hosts: gpu001\n"),
        "hosts: gpu[001-004]",
        "nodes[1].hosts: gpu001 is already in nodes[0]",
        id="duplicate-hostname",
    ),
    pytest.param(
        ("    profile: lab-h100-8x-hdr\n", "    profile: dgx-b200\n"),
        "dgx-b200",
        "nodes[1].profile: unknown profile 'dgx-b200'",
        id="unknown-profile",
    ),
    pytest.param(
        ("  expected_rate_gbps: 200\n", "  expected_rate_gbps: 400\n"),
        "expected_rate_gbps: 400",
        "profiles.lab-h100-8x-hdr.expected_rate_gbps: 4X HDR runs at 200 Gb/s, not 400",
        id="rate-vs-speed",
    ),
    pytest.param(
        ("  leaf_ports: 40\n", "  leaf_ports: 40\n  switch_name_pattern: '^(.*$'\n"),
        "switch_name_pattern",
        "fabric.switch_name_pattern: not a valid regex",
        id="bad-switch-regex",
    ),
    pytest.param(
        ("  verify_tls: false\n", "  verify_tls: false\n  network: 10.78.0.0/24\n"),
        "address_pattern",
        "bmc.address_pattern: gpu001's BMC address 10.77.0.1:8001 is outside 10.78.0.0/24",
        id="bmc-outside-network",
    ),
    pytest.param(
        ("thresholds:\n", "thresholds:\n  health:\n    gpu_temp_warn_c: 95\n"),
        "gpu_temp_warn_c",
        "thresholds.health.gpu_temp_warn_c: warning at 95 C must be below the error at 88 C",
        id="temp-warn-above-error",
    ),
    pytest.param(
        ('"10.77.0.1:8{number:03d}"', '"10.77.0.1:{su}"'),
        "address_pattern",
        "bmc.address_pattern: gpu002 and gpu001 get the same BMC address 10.77.0.1:1",
        id="bmc-collision",
    ),
]


@pytest.mark.parametrize(("edit", "where", "message"), CROSS_FIELD)
def test_cross_field_violation_is_located(
    edit: tuple[str, str], where: str | None, message: str
) -> None:
    text = edited(*edit)
    problems = problems_of(text)
    matching = [p for p in problems if message in p]
    assert matching, problems
    if where is not None:
        assert matching[0].startswith(f"c.yml:{line_of(text, where)}:"), matching[0]


def test_hca_on_a_gpu_that_does_not_exist() -> None:
    text = edited(
        "    expected_rate_gbps: 200\n",
        "    expected_rate_gbps: 200\n    gpu_count: 4\n",
    )
    problems = problems_of(text)
    assert any("profiles.lab-h100-8x-hdr.hcas[4].gpu: GPU 4 does not exist" in p for p in problems)


def test_more_than_four_sus_needs_an_explicit_spine_count() -> None:
    text = edited("hosts: gpu[001-004]", "hosts: gpu[001-020]")
    text = edited("  spines: 2\n", "", text)
    problems = problems_of(text)
    assert any("fabric.spines" in p and "beyond the SuperPOD table" in p for p in problems)


def test_bad_profile_name_points_at_the_key() -> None:
    text = edited("  lab-h100-8x-hdr:\n", "  Lab H100:\n")
    text = edited("profile: lab-h100-8x-hdr", "profile: Lab H100", text)
    problems = problems_of(text)
    assert problems[0] == (
        f"c.yml:{line_of(text, 'Lab H100:')}:3: profiles.Lab H100: bad name 'Lab H100': "
        "must match ^[a-z0-9][a-z0-9._-]*$"
    )


def test_literal_secret_in_ansible_vars_is_refused() -> None:
    text = LAB + (
        "ansible_vars:\n"
        "  slurmdbd_db_password: hunter2\n"
        "  munge_key_token: '{{ vault_munge }}'\n"
        "ansible_connection_vars:\n"
        "  ansible_ssh_private_key_file: /root/.ssh/id_ed25519\n"
    )
    (problem,) = problems_of(text)
    assert problem.startswith(
        f"c.yml:{line_of(text, 'hunter2')}:25: ansible_vars.slurmdbd_db_password: a literal secret"
    )


def test_a_version_yaml_reads_as_a_number_gets_the_hint_to_quote_it() -> None:
    # Issue 33: `cuda_version: 12.8` was refused as "Input should be a valid string" alone.
    text = edited("software:\n", "software:\n  cuda_version: 12.8\n")
    (problem,) = problems_of(text)
    line = line_of(text, "cuda_version: 12.8")
    assert problem.startswith(f"c.yml:{line}:17: software.cuda_version: ")
    assert 'quote it, cuda_version: "12.8"' in problem
    assert "12.10 reads as 12.1" in problem
