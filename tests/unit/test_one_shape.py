"""One shape for every command (issue 33): the spec positionally or as `--spec`, hosts as
`--nodes` (`--limit` kept), one `--workdir` (`--gate-workdir` kept), `--check` for the dry run
of every command that changes something, `--version --json`, shell completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cluster_tool.cli import main

NOPE = "/nonexistent/pod.yml"
# Every command that reads a spec, with what else it needs to get as far as reading it.
SPEC_COMMANDS = [
    ["render"],
    ["preflight"],
    ["bringup"],
    ["reimage", "--nodes", "gpu001"],
    ["validate-after", "--nodes", "gpu001"],
    ["spec", "check"],
    ["validate", "--health"],
    ["versions"],
    ["gate", "--rungs", "pairs"],
    ["fabric", "check", "--ibnetdiscover", NOPE],
    ["plan", "--model", "llama3-8b"],
    ["watch", "--once"],
    ["node-check", "--node", "gpu001"],
    ["profile", "discover", "--node", "gpu001"],
]


def _reads(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(args)
    err = capsys.readouterr().err
    assert (code, err.strip()) == (2, f"cluster-tool: {NOPE}: No such file or directory"), args


@pytest.mark.parametrize("command", SPEC_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_the_spec_positionally_and_as_an_option(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    words = [w for w in command if not w.startswith("-")][:2]
    head = (
        words
        if command[:2] in (["spec", "check"], ["fabric", "check"], ["profile", "discover"])
        else words[:1]
    )
    rest = command[len(head) :]
    _reads([*head, NOPE, *rest], capsys)
    _reads([*head, "--spec", NOPE, *rest], capsys)
    _reads([*head, *rest, f"--spec={NOPE}"], capsys)


def test_a_subcommand_is_never_taken_for_a_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "simulate", "--nodes", "4", "--bad", "5"]) == 2
    assert "more than --nodes" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["bringup", NOPE, "--nodes", "gpu001"],
        ["bringup", NOPE, "--limit", "gpu001"],
        ["bringup", NOPE, "--workdir", "/shared/gate"],
        ["bringup", NOPE, "--gate-workdir", "/shared/gate"],
        ["validate-after", NOPE, "--nodes", "gpu001", "--workdir", "/shared/gate"],
        ["reimage", NOPE, "--nodes", "gpu001", "--workdir", "/shared/gate"],
        ["bringup", NOPE, "--check"],
        ["reimage", NOPE, "--nodes", "gpu001", "--check"],
        ["gate", NOPE, "--check"],
        ["node-check", "--slurm", NOPE, "--check"],
    ],
    ids=lambda a: " ".join(a[i] for i in (0, -2, -1)),
)
def test_one_name_for_hosts_the_gate_folder_and_the_dry_run(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _reads(args, capsys)  # parsed: the options exist, and the spec is what stops it


def test_version_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    from cluster_tool import __version__

    assert main(["--version", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == __version__


def test_shell_completion_completes_commands() -> None:
    env = {**os.environ, "_CLUSTER_TOOL_COMPLETE": "complete_bash"}
    env.update(COMP_WORDS="cluster-tool ga", COMP_CWORD="1")
    proc = subprocess.run(
        [sys.executable, "-m", "cluster_tool"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split() == ["gate"], proc.stderr
