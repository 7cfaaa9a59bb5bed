"""The workflow commands' input checks: bad input is exit 2 and one line, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.cli import main
from tests.conftest import REPO

LAB = str(REPO / "examples" / "lab.yml")


def test_reimage_refuses_the_slurm_controller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAB_BMC_USERNAME", "admin")
    monkeypatch.setenv("LAB_BMC_PASSWORD", "planted-bmc-password")
    code = main(["reimage", LAB, "--nodes", "head,gpu001", "--runs-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "head" in err and "Slurm controller" in err
    assert "planted-bmc-password" not in err
    assert not any(tmp_path.iterdir()), "nothing is recorded for refused input"


def test_reimage_without_bmc_credentials_names_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAB_BMC_USERNAME", raising=False)
    monkeypatch.delenv("LAB_BMC_PASSWORD", raising=False)
    code = main(["reimage", LAB, "--nodes", "gpu001", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "LAB_BMC_USERNAME is not set" in capsys.readouterr().err


def test_plain_http_to_a_bmc_needs_the_explicit_insecure_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["reimage", LAB, "--nodes", "gpu001", "--bmc-scheme", "http", "--runs-dir", str(tmp_path)]
    )
    assert code == 2
    assert "--insecure-bmc" in capsys.readouterr().err


def test_validate_after_maintenance_with_an_unknown_switch_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", LAB, "--after-maintenance", "--switch", "su7-leaf-r0", "--no-dcgm"])
    assert code == 2
    assert "no such leaf or spine" in capsys.readouterr().err
    assert main(["validate", LAB, "--switch", "su1-leaf-r0"]) == 2


def test_bringup_retry_failed_without_an_earlier_run_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bringup", LAB, "--retry-failed", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "no earlier bringup" in capsys.readouterr().err
