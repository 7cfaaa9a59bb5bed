"""Every command's exit code under the four things that go wrong on a first day (README: 0 pass,
1 checks failed, 2 usage or bad input, 3 some hosts unreachable), and `--json` printing one
summary on stdout on every exit, failures included.

The hosts are really unreachable: an ssh config sends every host to port 1 of this machine,
where nothing listens (ssh: "Connection refused", exit 255, at once). Slurm is really missing:
PATH holds nothing but ssh. A cell that names no case says why the command cannot meet that
situation from the command line; the table must name every command the CLI has, so a new
command cannot go untested."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from cluster_tool.cli import app, main
from cluster_tool.slurm import AdminSlurm
from tests.conftest import FIXTURES, REPO
from tests.unit.checks.test_remote import lab_capture
from tests.unit.gate.fakes import ReplaySlurm
from tests.unit.gate.test_ladder import answers

LAB = str(REPO / "examples" / "lab.yml")
NOPE = "/nonexistent/cluster.yml"
SLURM_CLIENTS = {"scontrol", "squeue", "sinfo", "sbatch", "srun", "salloc", "sacct", "scancel"}
IBNETDISCOVER = str(FIXTURES / "parsers" / "ib" / "ibnetdiscover_ibsim_hdr.txt")


@dataclass
class Site:
    """What a case may point at: folders of its own, a dead ssh config, a capture."""

    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    @property
    def down(self) -> str:
        path = self.tmp / "down.ssh_config"
        path.write_text("Host *\n  HostName 127.0.0.1\n  Port 1\n  ConnectTimeout 5\n")
        return str(path)

    @property
    def runs(self) -> str:
        return str(self.tmp / "runs")

    def no_slurm(self) -> None:
        """PATH as it is, less Slurm's clients: no Slurm client on this machine."""
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        for folder in os.environ.get("PATH", "").split(os.pathsep):
            if not os.path.isdir(folder):
                continue
            for entry in os.scandir(folder):
                target = bin_dir / entry.name
                if entry.name not in SLURM_CLIENTS and not target.exists():
                    target.symlink_to(entry.path)
        self.monkeypatch.setenv("PATH", str(bin_dir))

    def capture(self, *, swap: bool) -> str:
        return str(lab_capture(self.tmp, swap=swap))

    def failing_run(self) -> str:
        from cluster_tool.workflows.runs import RunRecord

        record = RunRecord.create(self.tmp / "runs", "bringup", {"spec": LAB})
        record.finish({"command": "bringup", "verdict": "fail"}, [])
        return str(record.path)

    def slow_gate(self) -> None:
        replay = ReplaySlurm(answers(slow={"gpu003": 0.2}))
        self.monkeypatch.setattr("cluster_tool.slurm.connect", lambda *_: AdminSlurm(run=replay))


@dataclass(frozen=True)
class Case:
    args: Callable[[Site], list[str]]
    code: int
    says: str | None = None  # what stderr's line says, where the row pins it


Cell = Case | str  # a case, or why the command cannot meet the situation
BMC = ["--insecure-bmc", "--bmc-scheme", "http"]

TABLE: dict[str, dict[str, Cell]] = {
    "parse": {
        "bad input": Case(lambda s: ["parse", "nvidia-smi-q", NOPE], 2),
        "unreachable": "reads a file, reaches no host",
        "no slurm": "reads a file, asks nothing of Slurm",
        "failing": "judges nothing: a line it cannot read is exit 1 (tests/unit/parsers)",
    },
    "profile discover": {
        "bad input": Case(lambda s: ["profile", "discover", "--from", NOPE], 2),
        "unreachable": Case(
            lambda s: [
                "profile",
                "discover",
                "--spec",
                LAB,
                "--node",
                "gpu001",
                "--ssh-config",
                s.down,
            ],
            3,
        ),
        "no slurm": "reads one node (over SSH or a capture), asks nothing of Slurm",
        # The lab's nodes are H100s: against the H200 profile every GPU is a mismatch.
        "failing": Case(
            lambda s: [
                "profile",
                "discover",
                "--from",
                s.capture(swap=False),
                "--node",
                "gpu001",
                "--diff",
                "hgx-h200-8x-ndr",
            ],
            1,
        ),
    },
    "adopt": {
        # Not ibnetdiscover text: this module's own source.
        "bad input": Case(
            lambda s: ["adopt", __file__, "-p", "hgx-h100-8x-ndr", "-o", str(s.tmp / "a.yml")], 2
        ),
        "unreachable": "reads a saved ibnetdiscover capture, reaches no host",
        "no slurm": "reads a saved ibnetdiscover capture, asks nothing of Slurm",
        "failing": "judges nothing: departures are warnings in the draft, `fabric check` judges",
    },
    "init": {
        "bad input": Case(lambda s: ["init", "--profile", "no-such-profile"], 2),
        "unreachable": "writes a starter spec, reaches no host",
        "no slurm": "writes a starter spec",
        "failing": "judges nothing",
    },
    "render": {
        "bad input": Case(lambda s: ["render", NOPE], 2),
        "unreachable": "renders files, reaches no host",
        "no slurm": "renders files",
        "failing": "judges nothing: a spec it cannot render is bad input",
    },
    "plan": {
        "bad input": Case(lambda s: ["plan", "--spec", NOPE, "--model", "llama3-8b"], 2),
        "unreachable": "a model, reaches no host",
        "no slurm": "a model, asks nothing of Slurm",
        "failing": Case(lambda s: ["plan", "--model", "llama3-405b", "--nodes", "1"], 1),
    },
    "validate": {
        "bad input": Case(lambda s: ["validate", "--spec", NOPE, "--health"], 2),
        "unreachable": Case(
            lambda s: ["validate", LAB, "--health", "--ssh-config", s.down, "--no-dcgm"], 3
        ),
        # --via slurm leaves to SSH the nodes Slurm cannot step on: here every node, and SSH
        # reaches none of them either.
        "no slurm": Case(
            lambda s: [
                "validate",
                LAB,
                "--via",
                "slurm",
                "--workdir",
                str(s.tmp),
                "--no-dcgm",
                "--ssh-config",
                s.down,
            ],
            3,
        ),
        "failing": Case(
            lambda s: ["validate", LAB, "--from", s.capture(swap=True), "--no-dcgm"], 1
        ),
    },
    "node-check": {
        "bad input": Case(lambda s: ["node-check", "--node-file", NOPE], 2),
        "unreachable": "reads this node only",
        "no slurm": Case(lambda s: ["node-check", "--slurm", "--spec", LAB, "--node", "gpu001"], 2),
        # This machine has no GPU: nvidia-smi is missing, so gpu.driver fails, as on a node
        # whose driver is gone.
        "failing": Case(lambda s: ["node-check", "--spec", LAB, "--node", "gpu001"], 1),
    },
    "node-file": {
        "bad input": Case(lambda s: ["node-file", "gpu001", "--spec", NOPE], 2),
        "unreachable": "writes a file, reaches no host",
        "no slurm": "writes a file",
        "failing": "judges nothing",
    },
    "preflight": {
        "bad input": Case(lambda s: ["preflight", NOPE], 2),
        "unreachable": Case(lambda s: ["preflight", LAB, "--ssh-config", s.down], 3),
        "no slurm": Case(lambda s: ["preflight", LAB, "--ssh-config", s.down, "--slurm"], 2),
        "failing": "its failures are a missing secret (2) and what does not answer (3)",
    },
    "bringup": {
        "bad input": Case(lambda s: ["bringup", NOPE], 2),
        "unreachable": Case(
            lambda s: [
                "bringup",
                LAB,
                "--ssh-config",
                s.down,
                "--no-gate",
                "--runs-dir",
                s.runs,
            ],
            3,
        ),
        "no slurm": "asks Slurm only after the converge, which needs the hosts up "
        "(tests/unit/workflows/test_bringup.py fakes both)",
        "failing": "needs hosts that converge (tests/unit/workflows/test_bringup.py)",
    },
    "reimage": {
        "bad input": Case(lambda s: ["reimage", NOPE, "--nodes", "gpu001"], 2),
        "unreachable": Case(
            lambda s: [
                "reimage",
                LAB,
                "--nodes",
                "gpu001",
                "--slurm-via",
                "head",
                "--ssh-config",
                s.down,
                "--runs-dir",
                s.runs,
                *BMC,
            ],
            3,
        ),
        "no slurm": Case(
            lambda s: ["reimage", LAB, "--nodes", "gpu001", "--runs-dir", s.runs, *BMC], 2
        ),
        "failing": "needs BMCs and nodes that come back (tests/unit/workflows/test_reimage.py)",
    },
    "validate-after": {
        "bad input": Case(lambda s: ["validate-after", NOPE, "--nodes", "gpu001"], 2),
        # Its preflight, before the run starts: the node and the fabric's host as one list.
        "unreachable": Case(
            lambda s: [
                "validate-after",
                LAB,
                "--nodes",
                "gpu001",
                "--ssh-config",
                s.down,
                "--no-gate",
                "--no-dcgm",
                "--runs-dir",
                s.runs,
            ],
            3,
            says="cluster-tool: preflight: unreachable over SSH: gpu001,head (ssh: connect to "
            "host 127.0.0.1 port 1: Connection refused)",
        ),
        # The gate's Slurm, asked by the preflight: no client here is the operator's to fix.
        "no slurm": Case(
            lambda s: [
                "validate-after",
                LAB,
                "--nodes",
                "gpu001",
                "--ssh-config",
                s.down,
                "--no-dcgm",
                "--runs-dir",
                s.runs,
            ],
            2,
            says="--slurm-via",
        ),
        "failing": Case(
            lambda s: [
                "validate-after",
                LAB,
                "--nodes",
                "gpu003",
                "--from",
                s.capture(swap=True),
                "--no-gate",
                "--no-dcgm",
                "--runs-dir",
                s.runs,
            ],
            1,
        ),
    },
    "report": {
        "bad input": Case(lambda s: ["report", str(s.tmp / "no-such-run")], 2),
        "unreachable": "reads a run record",
        "no slurm": "reads a run record",
        "failing": Case(lambda s: ["report", s.failing_run()], 1),
    },
    "history": {
        "bad input": Case(lambda s: ["history", "gpu001", "--runs-dir", s.runs], 2),
        "unreachable": "reads the history store",
        "no slurm": "reads the history store",
        "failing": "reports a trend; the runs that record it judge it",
    },
    "versions": {
        "bad input": Case(lambda s: ["versions", "--spec", NOPE], 2),
        "unreachable": Case(lambda s: ["versions", "--spec", LAB, "--ssh-config", s.down], 3),
        "no slurm": "asks nothing of Slurm",
        "failing": Case(lambda s: ["versions", "--spec", LAB, "--from", s.capture(swap=False)], 1),
    },
    "watch": {
        "bad input": Case(lambda s: ["watch", "--spec", NOPE, "--once"], 2),
        "unreachable": Case(
            lambda s: [
                "watch",
                "--spec",
                LAB,
                "--once",
                "--ssh-config",
                s.down,
                "--slurm-via",
                "head",
                "--state-dir",
                str(s.tmp / "watch"),
            ],
            3,
        ),
        "no slurm": Case(
            lambda s: [
                "watch",
                "--spec",
                LAB,
                "--once",
                "--ssh-config",
                s.down,
                "--state-dir",
                str(s.tmp / "watch"),
            ],
            2,
        ),
        "failing": "needs nodes that answer (tests/unit/watch)",
    },
    "context set": {
        "bad input": Case(lambda s: ["context", "set", "no/such/name"], 2),
        "unreachable": "writes a file on this controller",
        "no slurm": "writes a file on this controller",
        "failing": "judges nothing",
    },
    "context show": {
        "bad input": Case(lambda s: ["context", "show", "no-context-here"], 2),
        "unreachable": "reads a file on this controller",
        "no slurm": "reads a file on this controller",
        "failing": "judges nothing",
    },
    "context list": {
        "bad input": Case(lambda s: ["context", "list", "--no-such-option"], 2),
        "unreachable": "reads files on this controller",
        "no slurm": "reads files on this controller",
        "failing": "judges nothing",
    },
    "spec check": {
        "bad input": Case(lambda s: ["spec", "check", NOPE], 2),
        "unreachable": "reads a file",
        "no slurm": "reads a file",
        "failing": "a spec that fails its checks is bad input: exit 2 (tests/unit/spec)",
    },
    "spec schema": {
        "bad input": Case(lambda s: ["spec", "schema", "--no-such-option"], 2),
        "unreachable": "prints a schema",
        "no slurm": "prints a schema",
        "failing": "judges nothing",
    },
    "gate": {
        "bad input": Case(lambda s: ["gate", "--spec", NOPE], 2),
        "unreachable": Case(
            lambda s: [
                "gate",
                "--spec",
                LAB,
                "--slurm-via",
                "head",
                "--ssh-config",
                s.down,
                "--workdir",
                str(s.tmp),
            ],
            3,
        ),
        "no slurm": Case(lambda s: ["gate", "--spec", LAB, "--workdir", str(s.tmp)], 2),
        "failing": Case(
            lambda s: [
                "gate",
                "--spec",
                LAB,
                "--rungs",
                "pairs",
                "--dry-run",
                "--workdir",
                str(s.tmp),
                "--poll",
                "0",
            ],
            1,
        ),
    },
    "gate simulate": {
        "bad input": Case(lambda s: ["gate", "simulate", "--nodes", "4", "--bad", "5"], 2),
        "unreachable": "a simulation",
        "no slurm": "a simulation",
        "failing": "scores the gate on a simulated fleet; bad nodes found are its success",
    },
    "fabric check": {
        "bad input": Case(lambda s: ["fabric", "check", "--spec", LAB, "--ibnetdiscover", NOPE], 2),
        "unreachable": "reads a file",
        "no slurm": "reads a file",
        "failing": Case(
            lambda s: ["fabric", "check", "--spec", LAB, "--ibnetdiscover", IBNETDISCOVER], 1
        ),
    },
}
# The lab (the `[lab]` extra, when installed) builds on this machine: bad input only; the lab
# tests run it.
LAB_COMMANDS = {
    "lab up": ["lab", "up", "--no-such-option"],
    "lab down": ["lab", "down", "--no-such-option"],
    "lab status": ["lab", "status", "--no-such-option"],
    "lab inject": ["lab", "inject", "no-such-fault"],
    "lab heal": ["lab", "heal", "--no-such-option"],
}
LAB_ONLY_BAD_INPUT = "the lab on this machine: its own tests"
for _name, _args in LAB_COMMANDS.items():
    TABLE[_name] = {
        "bad input": Case(lambda s, a=_args: list(a), 2),
        "unreachable": LAB_ONLY_BAD_INPUT,
        "no slurm": LAB_ONLY_BAD_INPUT,
        "failing": LAB_ONLY_BAD_INPUT,
    }
# `lab ssh` passes every argument to ssh: it has no bad input of its own.
TABLE["lab ssh"] = dict.fromkeys(("bad input", "unreachable", "no slurm", "failing"), "ssh's")

SCENARIOS = ("bad input", "unreachable", "no slurm", "failing")


def _commands(command: object, prefix: str = "") -> set[str]:
    subs = getattr(command, "commands", None)
    if not subs:
        return {prefix}
    found = {prefix} if prefix and getattr(command, "invoke_without_command", False) else set()
    for name, sub in subs.items():
        found |= _commands(sub, f"{prefix} {name}".strip())
    return found


def test_the_table_names_every_command() -> None:
    commands = _commands(typer.main.get_command(app))
    missing = commands - set(TABLE)
    assert not missing, f"commands without exit-code cases: {sorted(missing)}"
    for name, row in TABLE.items():
        assert set(row) == set(SCENARIOS), name
        assert isinstance(row["bad input"], Case) or name == "lab ssh", name


CASES = [
    pytest.param(name, scenario, cell, id=f"{name}|{scenario}")
    for name, row in TABLE.items()
    for scenario, cell in row.items()
    if isinstance(cell, Case)
]


@pytest.mark.parametrize(("name", "scenario", "case"), CASES)
def test_exit_code_and_json_summary(
    name: str,
    scenario: str,
    case: Case,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if name not in _commands(typer.main.get_command(app)):
        pytest.skip(f"{name}: the [lab] extra is not installed")
    site = Site(tmp_path, monkeypatch)
    monkeypatch.setenv("CLUSTER_TOOL_RUNS_DIR", site.runs)
    monkeypatch.delenv("CLUSTER_TOOL_SLURM_VIA", raising=False)
    monkeypatch.setenv("CLUSTER_TOOL_SLURMDBD_PASSWORD", "a-lab-only-password")
    monkeypatch.setenv("LAB_BMC_USERNAME", "admin")
    monkeypatch.setenv("LAB_BMC_PASSWORD", "a-lab-only-bmc-password")
    if scenario == "no slurm":
        site.no_slurm()
    if name == "gate" and scenario == "failing":
        site.slow_gate()
    args = case.args(site)
    capsys.readouterr()

    code = main([*args, "--json"])

    out, err = capsys.readouterr()
    assert code == case.code, f"{' '.join(args)}: exit {code}, stderr: {err}"
    summary = json.loads(out)  # one JSON document on every exit
    assert isinstance(summary, dict)
    if "exit_code" in summary:
        assert summary["exit_code"] == code
    if code == 2 or (code == 3 and "error" in summary):
        assert err.strip(), "a refusal says why on stderr"
        assert "internal error" not in err
    if case.says is not None:
        assert case.says in err, err
