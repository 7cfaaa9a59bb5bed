"""`cluster-tool context set|show|list` (issue 33): a cluster's context is made with a command,
0600, its secrets taken from the environment (never the command line) and shown by name only;
the jobs then find them there."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.workflows import preflight
from tests.conftest import REPO
from tests.unit.workflows.fakes import AnsweringTransport

SPEC = str(REPO / "examples" / "h100-1su.yml")
PASSWORD = "CLUSTER_TOOL_SLURMDBD_PASSWORD"
VALUE = "planted-dbd-password-0451"


def test_set_show_list_and_the_secret_only_by_name(
    no_cluster_context: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PASSWORD, VALUE)
    args = ["context", "set", SPEC, "--slurm-via", "head01", "--workdir", "/shared/gate"]
    assert main([*args, "--env", PASSWORD]) == 0
    path = no_cluster_context / "h100-1su.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kept = json.loads(path.read_text())
    assert kept["env"] == {PASSWORD: VALUE} and kept["slurm_via"] == "head01"
    assert kept["gate_workdir"] == "/shared/gate"
    assert VALUE not in capsys.readouterr().out

    assert main(["context", "show", "h100-1su", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["context"]
    assert shown["env"] == [PASSWORD] and shown["slurm_via"] == "head01"
    assert main(["context", "show", SPEC]) == 0
    text = capsys.readouterr().out
    assert f"{PASSWORD} (values hidden)" in text and VALUE not in text
    assert main(["context", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["contexts"]
    assert [c["cluster"] for c in listed] == ["h100-1su"]

    # An update keeps what it does not name; --unset-env forgets a secret.
    assert main(["context", "set", "h100-1su", "--unset-env", PASSWORD]) == 0
    kept = json.loads(path.read_text())
    assert kept["env"] == {} and kept["slurm_via"] == "head01"


def test_a_secret_is_never_taken_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["context", "set", "h100-1su", "--env", f"{PASSWORD}={VALUE}"]) == 2
    assert VALUE not in capsys.readouterr().err
    monkeypatch.delenv(PASSWORD, raising=False)  # and no terminal to ask on
    assert main(["context", "set", "h100-1su", "--env", PASSWORD]) == 2
    assert "set it in the environment" in capsys.readouterr().err


def test_the_jobs_find_the_secret_in_the_context(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PASSWORD, VALUE)
    assert main(["context", "set", SPEC, "--env", PASSWORD]) == 0
    monkeypatch.delenv(PASSWORD)
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport())
    capsys.readouterr()
    assert main(["preflight", SPEC, "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["checked"]["secrets"] == "ok"
