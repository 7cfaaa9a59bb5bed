"""Issue 32: one output sink for stdout, `--json` and the run folder, with the secrets registry
applied to all three. A node that echoes the BMC password (a probe's output names it) is shown
`[redacted]` on validate's per-node lines, in its `--json` and in its `--junit` file, as the run
folder always showed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool import output
from cluster_tool.cli import main
from cluster_tool.commands._context import show_run
from cluster_tool.redact import REDACTED, Secrets
from cluster_tool.remote.fanout import HostResult, ProbeOutput, load_capture, save_capture
from cluster_tool.workflows.jobs import RunOutcome
from cluster_tool.workflows.runs import RunRecord, RunSummary
from tests.conftest import REPO
from tests.unit.checks.test_remote import lab_capture

LAB = str(REPO / "examples" / "lab.yml")
# Quotes, a backslash, `<&>`: the forms JSON and XML give it are hidden too.
PASSWORD = 'Bmc"pa$$\\w<&>rd-7'


def _echoing_capture(tmp_path: Path) -> Path:
    """The lab capture with gpu002's ibstat output ending in a line that carries the BMC
    password (a wrapper script that logs its command line): the finding names that line."""
    folder = lab_capture(tmp_path)
    results = load_capture(folder)
    gpu002 = results["gpu002"]
    outputs = dict(gpu002.outputs)
    echoed = f"+ ipmitool -I lanplus -U admin -P {PASSWORD} chassis power status\n"
    outputs["ibstat"] = ProbeOutput(0, outputs["ibstat"].stdout + echoed)
    results["gpu002"] = HostResult("gpu002", outputs=outputs, probes=gpu002.probes)
    save_capture(tmp_path / "echo", results)
    return tmp_path / "echo"


@pytest.fixture
def bmc_password(monkeypatch: pytest.MonkeyPatch) -> str:
    # examples/lab.yml: bmc.credentials.password: {env: LAB_BMC_PASSWORD}
    monkeypatch.setenv("LAB_BMC_PASSWORD", PASSWORD)
    return PASSWORD


def test_validate_lines_json_and_junit_hide_the_bmc_password_a_node_echoes(
    bmc_password: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = _echoing_capture(tmp_path)
    junit = tmp_path / "junit.xml"
    args = ["validate", LAB, "--from", str(capture), "--no-dcgm"]
    assert main([*args, "--junit", str(junit)]) == 1
    lines = capsys.readouterr()
    assert main([*args, "--json"]) == 1
    machine = capsys.readouterr()
    data = json.loads(machine.out)
    echoed = [f for f in data["findings"] if f["node"] == "gpu002" and "ipmitool" in f["message"]]
    assert echoed and REDACTED in json.dumps(echoed), data["findings"]
    assert "ipmitool" in lines.out and REDACTED in lines.out
    junit_text = junit.read_text()
    assert "ipmitool" in junit_text and REDACTED in junit_text
    for shown in (lines.out, lines.err, machine.out, machine.err, junit_text):
        for form in (bmc_password, json.dumps(bmc_password)[1:-1], "pa$$\\w&lt;&amp;&gt;rd"):
            assert form not in shown


def test_a_secret_the_run_learnt_later_is_hidden_on_its_lines_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # reimage reads the BMC password from a vault during the run: the run folder hides it, and
    # so do the lines and the JSON the command prints from the same registry.
    output.reset()
    learnt = Secrets()
    record = RunRecord.create(tmp_path / "runs", "reimage", {"spec": LAB}, learnt)
    learnt.add("vault-bmc-s3cret")
    summary = RunSummary(
        command="reimage",
        run_id=record.run_id,
        started=None,
        inputs={},
        phases=[],
        nodes={"gpu001": {"verdict": "fail", "reason": "ipmitool -P vault-bmc-s3cret: refused"}},
        checks={},
        skipped={},
        links=[],
        busbw=[],
        verdict="fail",
        headline="FAIL",
        exit_code=1,
    )
    outcome = RunOutcome(record, summary)
    for json_out in (False, True):
        show_run(outcome, json_out)
        shown = capsys.readouterr()
        assert "vault-bmc-s3cret" not in shown.out + shown.err
        assert REDACTED in shown.out


def test_an_environment_secret_is_hidden_from_every_command_and_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLUSTER_TOOL_SLURMDBD_PASSWORD", "db-s3cret-pw")
    capture = tmp_path / "x.txt"
    capture.write_text("CA 'mlx5_0'\n\tCA type: MT4129\nibstat: db-s3cret-pw\n")
    assert main(["parse", "ibstat", str(capture)]) == 1  # no port: an error, with the line
    shown = capsys.readouterr()
    assert "db-s3cret-pw" not in shown.out + shown.err and REDACTED in shown.err
    assert main(["parse", "ibstat", str(capture), "--json"]) == 1
    shown = capsys.readouterr()
    assert "db-s3cret-pw" not in shown.out + shown.err and REDACTED in shown.err
