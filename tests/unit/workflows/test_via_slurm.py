"""`validate --via slurm`: the node checks as one Slurm job step, against a fake `srun` that does
what Slurm does with the step's argv: one task per node of `--nodelist`, each run with
SLURMD_NODENAME set to its node and its stdout/stderr in the `--output`/`--error` file with `%N`
expanded to that node. Each task runs the real command line the step asks for (`sh -c ...`), with
a stand-in `cluster-tool` on PATH that judges the node's captured probe outputs (the lab capture
of tests/unit/checks/test_remote.py) as `node-check --json` does, from the node file it was
given. The SSH path replays the same capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from cluster_tool.checks.node import check_node, read_node_file
from cluster_tool.findings import Report
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import (
    HostResult,
    Target,
    TransportError,
    load_capture,
    save_capture,
)
from cluster_tool.slurm import AdminSlurm
from cluster_tool.spec import load_spec
from cluster_tool.workflows.collect import ValidateResult, run_validate
from cluster_tool.workflows.via_slurm import versions_record
from tests.conftest import REPO
from tests.unit.checks.test_remote import lab_capture
from tests.unit.compat.test_versions import HEALTHY

NODES = ("gpu001", "gpu002", "gpu003", "gpu004")
XID_79 = (
    "[ 1234.567890] NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python, "
    "GPU has fallen off the bus.\n"
)

STAND_IN = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
from cluster_tool.checks.node import check_node, read_node_file
from cluster_tool.findings import Report
from cluster_tool.remote.fanout import load_capture
from cluster_tool.workflows.via_slurm import versions_record

args = sys.argv[1:]
expect = read_node_file(Path(args[args.index("--node-file") + 1]))
outputs = load_capture(Path(os.environ["CAPTURE"]))[os.environ["SLURMD_NODENAME"]].outputs
report = Report.from_findings(check_node(expect, outputs), {{"node": expect.node}})
data = report.to_json()
if "--versions" in args:
    data["versions"] = versions_record(expect.node, outputs)
print(json.dumps(data, indent=2, sort_keys=True))
sys.exit(report.exit_code)
"""


def capture_with_xid(tmp_path: Path, versions: dict[str, str] | None = None) -> Path:
    """The lab capture with an Xid 79 (GPU fallen off the bus) in gpu002's kernel log, and the
    version probe's output per node when given."""
    results = load_capture(lab_capture(tmp_path / "base"))
    for name in NODES:
        outputs = dict(results[name].outputs)
        if name == "gpu002":
            outputs["kernel-log"] = ProbeOutput(0, outputs["kernel-log"].stdout + XID_79)
        if versions and name in versions:
            outputs["versions"] = ProbeOutput(0, versions[name])
        results[name] = HostResult(name, outputs=outputs, probes=tuple(outputs))
    save_capture(tmp_path / "cap", results)
    return tmp_path / "cap"


class FakeSrun:
    """Slurm's side of the step: node states, and srun running each task as described above.
    `silent` nodes never run their task (no file: the node never answered); `prints` replaces
    a node's output with the given text."""

    def __init__(
        self,
        tmp_path: Path,
        capture: Path,
        states: dict[str, str] | None = None,
        silent: Iterable[str] = (),
        prints: dict[str, str] | None = None,
        refuse: str | None = None,
        in_process: bool = True,
    ) -> None:
        self.bin = tmp_path / "node-bin"
        self.bin.mkdir()
        (self.bin / "cluster-tool").write_text(STAND_IN)
        (self.bin / "cluster-tool").chmod(0o755)
        self.capture = capture
        self.states = states or {}
        self.silent = set(silent)
        self.prints = prints or {}
        self.refuse = refuse
        self.in_process = in_process
        self.steps: list[tuple[list[str], float]] = []

    def slurm(self) -> AdminSlurm:
        return AdminSlurm(run=self.run, step=self.step)

    def run(self, argv: Sequence[str]) -> str:
        assert list(argv[:4]) == ["scontrol", "show", "node", "-o"], argv
        lines = []
        for n in NODES:
            state = self.states.get(n, "IDLE")
            reason = "maintenance [root@2026-12-01T10:00:00]" if "DRAIN" in state else ""
            lines.append(f"NodeName={n} Arch=x86_64 State={state} Partitions=gpu Reason={reason}\n")
        return "".join(lines)

    def step(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        self.steps.append((list(argv), timeout))
        if self.refuse:
            return 1, f"srun: error: {self.refuse}\n"
        opts = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
        command = list(argv[next(i for i, a in enumerate(argv) if i and not a.startswith("--")) :])
        worst = 0
        for node in NodeSet(opts["nodelist"]):
            if node in self.silent:
                continue
            out = Path(opts["output"].replace("%N", node))
            err = Path(opts["error"].replace("%N", node))
            if node in self.prints:
                out.write_text(self.prints[node])
                continue
            if self.in_process:
                # What the stand-in prints, without a process per node: the node file is the
                # one the command names for this node ("$0/$SLURMD_NODENAME.json").
                assert command[:2] == ["sh", "-c"] and "$0/$SLURMD_NODENAME.json" in command[2]
                expect = read_node_file(Path(command[3]) / f"{node}.json")
                outputs = load_capture(self.capture)[node].outputs
                report = Report.from_findings(check_node(expect, outputs), {"node": node})
                data = report.to_json()
                if "--versions" in command:
                    data["versions"] = versions_record(node, outputs)
                out.write_text(json.dumps(data))
                worst = max(worst, report.exit_code)
                continue
            env = {
                **os.environ,
                "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
                "PYTHONPATH": str(REPO),
                "SLURMD_NODENAME": node,
                "CAPTURE": str(self.capture),
            }
            with out.open("wb") as o, err.open("wb") as e:
                rc = subprocess.run(command, stdout=o, stderr=e, env=env, check=False).returncode
            worst = max(worst, rc)
        return worst, "srun: error: gpu002: task 1: Exited with exit code 1\n" if worst else ""


def keys(result: ValidateResult) -> set[tuple[str, str | None, str | None, str]]:
    return {(f.check, f.node, f.component, f.severity) for f in result.report.findings}


def via_slurm(fake: FakeSrun, tmp_path: Path, **kw: object) -> ValidateResult:
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    return run_validate(
        load_spec(REPO / "examples" / "lab.yml"),
        fabric=False,
        dcgm=False,
        slurm=fake.slurm(),
        shared=shared,
        **kw,  # type: ignore[arg-type]
    )


def test_the_slurm_step_gives_the_ssh_paths_findings_naming_the_faulty_node(
    tmp_path: Path,
) -> None:
    # Versions too: gpu001's fabric manager behind its driver, gpu002's mlx5_1 behind the fleet.
    versions = dict.fromkeys(NODES, HEALTHY)
    versions["gpu001"] = HEALTHY.replace("fabricmanager 570.172.08", "fabricmanager 570.172.05")
    versions["gpu002"] = HEALTHY.replace(
        "hca mlx5_1 MT4129 28.46.1006", "hca mlx5_1 MT4129 28.46.3048"
    )
    capture = capture_with_xid(tmp_path, versions)
    over_ssh = run_validate(
        load_spec(REPO / "examples" / "lab.yml"), replay=capture, fabric=False, dcgm=False
    )
    fake = FakeSrun(tmp_path, capture, in_process=False)
    stepped = via_slurm(fake, tmp_path)
    assert ("gpu.xid", "gpu002", "GPU0", "error") in keys(over_ssh)
    assert ("version.incompatible", "gpu001", "fabricmanager", "error") in keys(over_ssh)
    assert ("version.outlier", "gpu002", "hca_firmware mlx5_1", "warning") in keys(over_ssh)
    assert keys(stepped) == keys(over_ssh)
    assert stepped.exit_code == over_ssh.exit_code == 1
    # One step over the four nodes, one task each, that neither dies with its first failed
    # task nor waits forever for a node.
    (argv, timeout), *more = fake.steps
    assert more == []
    assert argv[0] == "srun" and "--nodelist=gpu[001-004]" in argv and "--nodes=4" in argv
    assert "--ntasks-per-node=1" in argv and "--kill-on-bad-exit=0" in argv
    assert any(a.startswith("--time=") for a in argv) and any(a.startswith("--wait=") for a in argv)
    assert 0 < timeout < 1200
    assert stepped.report.summary["slurm_step"]["nodes"] == 4


def test_a_node_that_never_answers_is_its_own_finding_and_the_others_stand(
    tmp_path: Path,
) -> None:
    fake = FakeSrun(tmp_path, capture_with_xid(tmp_path), silent={"gpu003"})
    result = via_slurm(fake, tmp_path)
    gone = [f for f in result.report.findings if f.check == "os.unreachable"]
    assert [(f.node, f.expected) for f in gone] == [
        ("gpu003", "a node-check record from the Slurm step")
    ]
    assert "no record" in (gone[0].observed or "")
    assert ("gpu.xid", "gpu002", "GPU0", "error") in keys(result)
    assert result.unreachable == ["gpu003"] and result.exit_code == 3
    assert {f.node for f in result.report.findings} == set(NODES)


def test_a_record_naming_another_node_is_refused_not_read(tmp_path: Path) -> None:
    forged = {
        "status": "fail",
        "summary": {"node": "gpu003"},
        "findings": [
            {"check": "gpu.xid", "severity": "error", "node": "gpu003", "component": "GPU5",
             "expected": None, "observed": None, "message": "gpu003 GPU5: Xid 79"},
        ],
    }  # fmt: skip
    fake = FakeSrun(
        tmp_path, capture_with_xid(tmp_path), prints={"gpu004": json.dumps(forged) + "\n"}
    )
    result = via_slurm(fake, tmp_path)
    assert ("gpu.xid", "gpu003", "GPU5", "error") not in keys(result)
    refused = [f for f in result.report.findings if f.check == "os.unreachable"]
    assert [f.node for f in refused] == ["gpu004"]
    assert "names other nodes" in (refused[0].observed or "")
    # Text that is not node-check's JSON is named, quoted, and not read either.
    fake = FakeSrun(tmp_path / "b", capture_with_xid(tmp_path / "b"), prints={"gpu001": "\x1b[2J"})
    (tmp_path / "b" / "shared").mkdir()
    result = via_slurm(fake, tmp_path / "b")
    bad = [f for f in result.report.findings if f.check == "os.unreachable"]
    assert [f.node for f in bad] == ["gpu001"] and "\x1b" not in (bad[0].observed or "")


class DownOverSsh:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        self.asked.append(target.name)
        raise TransportError("Connection refused")


def test_drained_and_busy_nodes_are_read_over_ssh_with_why(tmp_path: Path) -> None:
    fake = FakeSrun(
        tmp_path, capture_with_xid(tmp_path), states={"gpu001": "IDLE+DRAIN", "gpu004": "ALLOCATED"}
    )
    ssh = DownOverSsh()
    result = via_slurm(fake, tmp_path, transport=ssh)
    (argv, _), *_ = fake.steps
    assert "--nodelist=gpu[002-003]" in argv and "--nodes=2" in argv
    assert sorted(ssh.asked) == ["gpu001", "gpu004"]
    over_ssh = result.report.summary["slurm_step"]["over_ssh"]
    assert over_ssh["gpu001"] == "drained in Slurm (maintenance)"
    assert "ALLOCATED" in over_ssh["gpu004"]
    assert ("gpu.xid", "gpu002", "GPU0", "error") in keys(result)
    unreachable = {
        f.node: f.expected for f in result.report.findings if f.check == "os.unreachable"
    }
    assert unreachable == {"gpu001": "reachable over SSH", "gpu004": "reachable over SSH"}


def test_a_step_slurm_refuses_leaves_every_node_to_ssh(tmp_path: Path) -> None:
    fake = FakeSrun(
        tmp_path,
        capture_with_xid(tmp_path),
        refuse="Unable to allocate resources: Requested nodes are busy",
    )
    ssh = DownOverSsh()
    result = via_slurm(fake, tmp_path, transport=ssh)
    assert sorted(ssh.asked) == list(NODES)
    why = result.report.summary["slurm_step"]["over_ssh"]["gpu003"]
    assert why.startswith("the Slurm step did not start") and "Requested nodes are busy" in why


def test_via_is_ssh_or_slurm_and_its_options_go_with_it(tmp_path: Path) -> None:
    spec = str(REPO / "examples" / "lab.yml")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cluster_tool", "validate", spec, *args],
            capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        )  # fmt: skip

    bad = cli("--via", "pdsh")
    assert bad.returncode == 2 and "--via: ssh or slurm" in bad.stderr
    stray = cli("--slurm-via", "head")
    assert stray.returncode == 2 and "go with --via slurm" in stray.stderr
    replay = cli("--via", "slurm", "--from", str(tmp_path))
    assert replay.returncode == 2 and "drop --from/--save" in replay.stderr
