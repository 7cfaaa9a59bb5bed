"""Slurm's Prolog and Epilog through node-check (issue 22): the prolog refuses a failing node and
leaves Slurm alone on a healthy one; the epilog drains for what a job's run added (a new Xid, a
link that went down, error counters over the spec's rate) with a reason node-check does not lift.

Kernel logs are gpud's real captures (tests/fixtures/parsers/real, source on line 1); the other
outputs are test_remote's lab node (real nvidia-smi -q and ibstat captures)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from cluster_tool.checks.node import NodeExpectations, expectations_for
from cluster_tool.drains import Owner, is_ours, may_lift
from cluster_tool.remote.fanout import Target
from cluster_tool.spec import load_spec
from cluster_tool.workflows.job_checks import probes_for_prolog, run_epilog, run_prolog
from cluster_tool.workflows.node_check import slurm_health_action
from tests.conftest import REPO, read_real_output, smi_at
from tests.unit.checks.test_remote import FakeSlurm, _topo_for_profile

NODE = "gpu003"
REAL = REPO / "tests" / "fixtures" / "parsers" / "real"


def _log(name: str) -> str:
    return "\n".join((REAL / name).read_text().splitlines()[1:]) + "\n"  # line 1: source


# Application faults only (Xid 13, 43: warnings, no drain) ...
APP_XIDS = _log("dmesg_decode_iso_xid13_xid43.txt")
# ... and the first line of the other capture: Xid 48, a double-bit ECC error (fatal by default).
DBE_LINE = next(line for line in _log("dmesg_iso_xid48_dbe_xid63_xid94.txt").splitlines()
                if "Xid (PCI:0000:19:00): 48" in line)  # fmt: skip


def _expect() -> NodeExpectations:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    rendered = "\n".join(
        line
        for line in (REPO / "inventory" / "example" / "nccl.conf").read_text().splitlines()
        if not line.startswith("NCCL_SOCKET_IFNAME")
    )
    return expectations_for(cluster, NODE, nccl_conf=rendered + "\nNCCL_SOCKET_IFNAME==eth0\n")


def _counters(expect: NodeExpectations, **bumped: dict[str, int]) -> str:
    """The port-counters probe's lines: every compute HCA at 0, but for `bumped[hca][file]`."""
    files = ("link_downed", "symbol_error", "link_error_recovery", "port_rcv_errors")
    return "".join(
        f"/sys/class/infiniband/{h.device}/ports/1/counters/{f} "
        f"{bumped.get(h.device, {}).get(f, 0)}\n"
        for h in expect.profile.compute_hcas
        for f in files
    )


class FakeNode:
    """The node as the probes see it: text per probe name; records which probes ran."""

    def __init__(self, expect: NodeExpectations, kernel_log: str, counters: str) -> None:
        rendered = expect.nccl_conf or ""
        self.outputs = {
            "hostname": f"{NODE}\n",
            "nvidia-smi-q": smi_at(
                read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt"),
                expect.profile.gpu_pci,
            ),
            "ibstat": read_real_output("ibstat_h100_ib_active_some_eth_down.txt").replace(
                "Rate: 400", "Rate: 200"
            ),
            "kernel-log": kernel_log,
            "modules": "nvidia\nnvidia_peermem\n",
            "nvidia-version": (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.08\n"
            ),
            "kernel": "6.1.0-27-amd64\n",
            "nccl-conf": rendered,
            "nvidia-smi-topo": _topo_for_profile(),
            "port-counters": counters,
            # The lab spec has no storage section: the build host's real mounts will do.
            "storage": (
                Path(__file__).resolve().parents[2] / "fixtures/storage/build-host-mounts-df.txt"
            )
            .read_text(encoding="utf-8")
            .split("\n", 1)[1],
        }
        self.ran: list[str] = []

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        token = re.search(r"@@cluster-tool (\w+) ", script)
        assert token is not None
        out = b""
        for name in re.findall(r"^run ([a-z0-9-]+) \d+ ", script, re.MULTILINE):
            self.ran.append(name)
            data = self.outputs.get(name, "").encode()
            rc = 0 if name in self.outputs else 127
            out += f"@@cluster-tool {token[1]} {name} {rc} {len(data)} 0@@\n".encode() + data
        return 0, out, b""


def test_the_prolog_passes_a_healthy_node_without_calling_slurm_and_refuses_a_failing_one(
    tmp_path: Path,
) -> None:
    expect = _expect()
    slurm = FakeSlurm()
    node = FakeNode(expect, APP_XIDS, _counters(expect))
    check = run_prolog(expect, "4242", slurm, transport=node, state_dir=tmp_path)
    assert not check.refused and check.action.action == "none"
    assert slurm.calls == []  # SchedMD: prologs should not call Slurm commands
    assert not [f for f in check.findings if f.fails]
    assert "dcgmi-diag" not in node.ran and "mlxlink" not in node.ran  # the fast checks only
    assert {"nvidia-smi-q", "ibstat", "kernel-log", "port-counters"} <= set(node.ran)
    assert (tmp_path / "4242.json").is_file()

    failing = FakeNode(expect, APP_XIDS + DBE_LINE + "\n", _counters(expect))
    check = run_prolog(expect, "4243", slurm, transport=failing, state_dir=tmp_path)
    assert check.refused
    assert slurm.calls and slurm.calls[0][0] == "drain"
    assert slurm.node.reason.startswith("cluster-tool: gpu.xid"), slurm.node.reason
    assert "48" in slurm.node.reason
    # node-check's own reason, but an Xid's: a later clean kernel log (rotated, or the node
    # rebooted) does not re-prove it, so the periodic health check leaves the node drained.
    kept = slurm_health_action(NODE, [], slurm, not_run={})
    assert kept.action == "kept" and "gpu.xid" in (kept.why or ""), kept
    assert slurm.node.drained


def test_the_epilog_drains_for_an_xid_that_came_during_the_job_and_only_that(
    tmp_path: Path,
) -> None:
    expect = _expect()
    slurm = FakeSlurm()
    before = FakeNode(expect, APP_XIDS, _counters(expect))
    run_prolog(expect, "7", slurm, transport=before, state_dir=tmp_path)
    # The application Xids were there before the job: nothing new, nothing drained.
    same = run_epilog(expect, "7", slurm, transport=before, state_dir=tmp_path)
    assert same.action.action == "none" and slurm.calls == [] and same.findings == []
    assert not (tmp_path / "7.json").exists()  # the baseline goes with the job

    run_prolog(expect, "8", slurm, transport=before, state_dir=tmp_path)
    after = FakeNode(expect, APP_XIDS + DBE_LINE + "\n", _counters(expect))
    check = run_epilog(expect, "8", slurm, transport=after, state_dir=tmp_path)
    assert check.action.action == "drain"
    reason = slurm.node.reason
    assert reason.startswith("cluster-tool epilog: gpu.xid") and "48" in reason, reason
    assert is_ours(reason) and not may_lift(reason, Owner.HEALTH)
    # The health check, healthy again, leaves the epilog's drain alone.
    assert slurm_health_action(NODE, [], slurm).action == "left"


def test_the_epilog_drains_for_a_link_that_went_down_or_errors_over_the_rate(
    tmp_path: Path,
) -> None:
    expect = _expect()
    hca = expect.profile.compute_hcas[1].device
    clock = iter([1000.0, 1060.0])
    slurm = FakeSlurm()
    base = FakeNode(expect, APP_XIDS, _counters(expect))
    run_prolog(expect, "9", slurm, transport=base, state_dir=tmp_path, clock=lambda: next(clock))
    # One minute of job: 1 symbol error is within 10/h (the first is allowed), 500 is not; a
    # LinkDowned is a flap (0/h by default).
    bumped = {hca: {"symbol_error": 500, "link_downed": 1}}
    after = FakeNode(expect, APP_XIDS, _counters(expect, **bumped))
    check = run_epilog(
        expect, "9", slurm, transport=after, state_dir=tmp_path, clock=lambda: next(clock)
    )
    found = {(f.check, f.component, f.observed) for f in check.findings}
    assert found == {("link.flap", hca, "+1"), ("link.errors", hca, "SymbolErrorCounter +500")}
    assert slurm.node.reason.startswith(
        f"cluster-tool epilog: link.flap {hca}: LinkDownedCounter +1"
    )
    assert slurm.node.reason.endswith("(+1 more)")

    clock = iter([1000.0, 1060.0])
    quiet = FakeSlurm()
    run_prolog(expect, "10", quiet, transport=base, state_dir=tmp_path, clock=lambda: next(clock))
    one = FakeNode(expect, APP_XIDS, _counters(expect, **{hca: {"symbol_error": 1}}))
    check = run_epilog(
        expect, "10", quiet, transport=one, state_dir=tmp_path, clock=lambda: next(clock)
    )
    assert check.findings == [] and quiet.calls == []


def test_an_admins_drain_is_left_alone_by_the_epilog(tmp_path: Path) -> None:
    expect = _expect()
    slurm = FakeSlurm(reason="swapping a PSU", drained=True)
    run_prolog(
        expect,
        "11",
        slurm,
        transport=FakeNode(expect, APP_XIDS, _counters(expect)),
        state_dir=tmp_path,
    )
    after = FakeNode(expect, APP_XIDS + DBE_LINE + "\n", _counters(expect))
    check = run_epilog(expect, "11", slurm, transport=after, state_dir=tmp_path)
    assert check.action.action == "left" and slurm.node.reason == "swapping a PSU"
    assert [c for c in slurm.calls if c[0] == "drain"] == []


def test_the_epilog_without_a_baseline_judges_nothing(tmp_path: Path) -> None:
    expect = _expect()
    slurm = FakeSlurm()
    after = FakeNode(expect, DBE_LINE + "\n", _counters(expect))
    check = run_epilog(expect, "12", slurm, transport=after, state_dir=tmp_path)
    assert check.action.action == "none" and slurm.calls == [] and after.ran == []
    assert check.notes == ["no baseline for job 12"]


def test_a_job_id_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    from cluster_tool.errors import UsageError

    with pytest.raises(UsageError, match="not a Slurm job id"):
        run_epilog(_expect(), "../../etc/passwd", FakeSlurm(), state_dir=tmp_path)


def test_the_prolog_runs_the_fast_probes() -> None:
    names = {p.name for p in probes_for_prolog()}
    assert {"nvidia-smi-q", "nvidia-smi-topo", "ibstat", "kernel-log"} <= names
    assert names.isdisjoint({"dcgmi-diag", "mlxlink", "lspci", "nvlink-errors"})


def test_node_check_prolog_without_a_job_id_is_a_one_line_usage_error(tmp_path: Path) -> None:
    node_file = tmp_path / "node.json"
    node_file.write_text(json.dumps(_expect().to_node_file()))
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "cluster-tool"), "node-check", "--prolog",
         "--node-file", str(node_file)],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no job id" in proc.stderr
    both = subprocess.run(
        [str(REPO / ".venv" / "bin" / "cluster-tool"), "node-check", "--prolog", "--epilog",
         "--job-id", "1", "--node-file", str(node_file)],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert both.returncode == 2 and "one each" in both.stderr


def test_probe_outputs_cover_the_fast_probes() -> None:
    # The fake answers every fast probe with real-format text, so the healthy case is healthy
    # because the checks passed, not because probes were missing.
    expect = _expect()
    node = FakeNode(expect, APP_XIDS, _counters(expect))
    assert {p.name for p in probes_for_prolog()} - {"versions"} <= set(node.outputs)
