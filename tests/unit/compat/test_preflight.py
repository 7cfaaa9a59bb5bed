"""Before install: an incompatible combination of pins is refused before any host is touched,
by `bringup` (it loads the spec, whose check holds the pins against the matrix) and by the
site playbook's preflight (it holds the rendered inventory's spec against the same matrix,
through `python -m cluster_tool.spec.pins`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cluster_tool.cli import main
from tests.conftest import with_sections

ROOT = Path(__file__).resolve().parents[3]
LAB = (ROOT / "examples" / "lab.yml").read_text(encoding="utf-8")
# CUDA 12.9 GA needs driver >= 575.51.03 (NVIDIA's table); the default driver is 570.172.08.
BROKEN = with_sections(LAB, 'software:\n  cuda_version: "12.9"\n')


def test_bringup_refuses_an_incompatible_spec_before_touching_a_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import cluster_tool.workflows.jobs as jobs

    def must_not_run(*_: object, **__: object) -> None:
        raise AssertionError("bring-up started on an incompatible spec")

    monkeypatch.setattr(jobs, "run_bringup", must_not_run)
    spec = tmp_path / "c.yml"
    spec.write_text(BROKEN)
    assert main(["bringup", str(spec)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{spec}:") and "[cuda-12-9-min-driver: https://" in line


def _preflight_check_task() -> dict:  # type: ignore[type-arg]
    plays = yaml.safe_load((ROOT / "playbooks/phases/preflight_nodes.yml").read_text())
    tasks = [t for play in plays for t in play.get("tasks", [])]
    found = [t for t in tasks if "spec.pins" in json.dumps(t.get("ansible.builtin.command", {}))]
    assert len(found) == 1, "preflight_nodes.yml runs `python -m cluster_tool.spec.pins` once"
    return found[0]


def test_the_playbook_preflight_checks_the_rendered_spec_against_the_matrix() -> None:
    task = _preflight_check_task()
    argv = task["ansible.builtin.command"]["argv"]
    assert argv[1:] == ["-m", "cluster_tool.spec.pins", "{{ inventory_dir }}/spec.json"]
    assert task["delegate_to"] == "localhost" and task["run_once"] is True
    assert task["changed_when"] is False and task["check_mode"] is False


def test_what_the_preflight_runs_refuses_an_incompatible_rendered_spec(tmp_path: Path) -> None:
    spec = json.loads((ROOT / "inventory/example/spec.json").read_text())
    argv = _preflight_check_task()["ansible.builtin.command"]["argv"]
    command = [sys.executable, *argv[1:3]]

    good = tmp_path / "good" / "spec.json"
    good.parent.mkdir()
    good.write_text(json.dumps(spec))
    assert subprocess.run([*command, str(good)], capture_output=True).returncode == 0

    spec["software"]["cuda_version"] = "12.9"
    bad = tmp_path / "bad" / "spec.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(spec))
    done = subprocess.run([*command, str(bad)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{bad}: software.")
    assert "[cuda-12-9-min-driver: https://" in done.stderr


def test_the_preflight_check_judges_versions_only(tmp_path: Path) -> None:
    # A lab's rendered spec carries its SSH settings in ansible_vars, which `spec check` would
    # question; the version check does not, and still refuses a bad pin beside them.
    spec = json.loads((ROOT / "inventory/example/spec.json").read_text())
    spec["ansible_vars"]["ansible_user"] = "root"
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    command = [sys.executable, "-m", "cluster_tool.spec.pins", str(path)]
    assert subprocess.run(command, capture_output=True).returncode == 0
    spec["software"]["slurm_version"] = "21.08.8"
    path.write_text(json.dumps(spec))
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 2 and "slurm-cgroup-v2" in done.stderr
