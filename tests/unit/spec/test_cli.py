"""`cluster-tool spec check|schema` and `cluster-tool init`, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cluster_tool.cli import main
from cluster_tool.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_check_valid_spec_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "check", str(EXAMPLES / "h100-1su.yml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "31 GPU nodes" in out and "8 leaves, 4 spines" in out


def test_check_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "check", str(EXAMPLES / "h200-4su.yml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is True
    assert (data["summary"]["gpu_nodes"], data["summary"]["sus"]) == (127, 4)
    assert (data["summary"]["leaves"], data["summary"]["spines"]) == (32, 16)


def test_check_bad_spec_one_line_per_problem_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLES / "lab.yml").read_text()
    text = text.replace("  rails: 8\n", "  rails: eight\n").replace("  su_size: 4\n", "  sus: 4\n")
    bad = tmp_path / "bad.yml"
    bad.write_text(text)
    assert main(["spec", "check", str(bad)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"{bad}:") for line in lines)
    assert lines[0].split(": ")[1] == "fabric.rails"
    assert "fabric.sus: unknown key 'sus'" in lines[1]


def test_check_bad_spec_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("apiVersion: cluster-tool/v2\nkind: Cluster\n")
    assert main(["spec", "check", str(bad), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False
    version = next(p for p in data["problems"] if p["path"] == "apiVersion")
    assert (version["line"], version["column"]) == (1, 13)
    assert "cluster-tool/v1" in version["message"]
    # Missing top-level sections are reported too, at the top of the file.
    assert {"nodes", "fabric", "slurm"} <= {p["path"] for p in data["problems"]}


def test_check_missing_file_is_usage_error(tmp_path: Path) -> None:
    assert main(["spec", "check", str(tmp_path / "nope.yml")]) == 2


def test_schema_is_json_schema_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["additionalProperties"] is False
    assert "apiVersion" in schema["required"]
    fabric = schema["$defs"]["Fabric"]["properties"]
    assert fabric["su_size"]["default"] == 32
    assert "SuperPOD" in fabric["spines"]["description"]


@pytest.mark.parametrize(
    ("profile", "hosts", "sus"),
    [("hgx-h100-8x-ndr", "gpu[001-032]", 1), ("hgx-h200-8x-ndr", "node[1-100]", 4)],
)
def test_init_writes_a_commented_spec_that_checks(
    tmp_path: Path, profile: str, hosts: str, sus: int
) -> None:
    out = tmp_path / "cluster.yml"
    assert main(["init", "--profile", profile, "--hosts", hosts, "-o", str(out)]) == 0
    text = out.read_text()
    assert text.count("\n#") + text.count("  #") >= 5  # it explains itself
    cluster = load_spec(out)
    assert cluster.su_count == sus
    assert {n.profile_name for n in cluster.gpu_nodes()} == {profile}
    assert yaml.safe_load(text)["nodes"][1]["hosts"] == hosts
    assert main(["spec", "check", str(out)]) == 0


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "cluster.yml"
    out.write_text("mine")
    assert main(["init", "-o", str(out)]) == 2
    assert out.read_text() == "mine"
    assert main(["init", "-o", str(out), "--force"]) == 0


def test_init_bad_hostlist_or_profile(tmp_path: Path) -> None:
    assert main(["init", "--hosts", "gpu[001-", "-o", str(tmp_path / "a.yml")]) == 2
    assert main(["init", "--profile", "dgx-a100", "-o", str(tmp_path / "b.yml")]) == 2
    assert not list(tmp_path.iterdir())


def test_schema_lets_a_profile_extend_another(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "schema"]) == 0
    profile = json.loads(capsys.readouterr().out)["$defs"]["NodeProfile"]
    assert "required" not in profile
    assert profile["if"] == {"not": {"required": ["extends"]}}
    assert "hcas" in profile["then"]["required"]
