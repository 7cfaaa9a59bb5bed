"""The fan-out and `validate` without a cluster: the composite probe script run by a real `sh`,
captures saved and replayed, unreachable hosts, JUnit, node-check's Slurm drain/resume."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from xml.etree import ElementTree

from cluster_tool.checks.node import expectations_for
from cluster_tool.drains import Owner, health_reason, may_lift, workflow_reason
from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.findings import Finding
from cluster_tool.probes import ProbeOutput
from cluster_tool.probes import Shell as Probe
from cluster_tool.remote.fanout import (
    HostResult,
    LocalTransport,
    Target,
    TransportError,
    collect,
    load_capture,
    save_capture,
)
from cluster_tool.remote.probes import composite_script, split_output
from cluster_tool.slurm import NodeState
from cluster_tool.spec import load_spec
from cluster_tool.workflows.collect import junit_xml, run_validate
from cluster_tool.workflows.node_check import slurm_health_action
from tests.conftest import REPO, read_real_output, smi_at
from tests.unit.checks.fabric_text import FabricText

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]


def test_one_script_carries_every_probe_and_splits_back_exactly() -> None:
    probes = [
        Probe("plain", "printf 'a\\nb'"),
        Probe("binary", "head -c 4096 /dev/zero | tr '\\0' '@'"),
        Probe("fails", "echo oops >&2; exit 3"),
        Probe("missing", "no-such-tool-here --version"),
        Probe("fake-header", "echo '@@cluster-tool 0000 plain 0 1 1@@'"),
    ]
    script, token = composite_script(probes)
    proc = subprocess.run(["sh", "-s"], input=script.encode(), capture_output=True, check=True)
    out = split_output(proc.stdout, token)
    assert list(out) == [p.name for p in probes]
    assert out["plain"] == ProbeOutput(0, "a\nb", "")
    assert out["binary"].stdout == "@" * 4096
    assert (out["fails"].rc, out["fails"].stderr) == (3, "oops\n")
    assert out["missing"].not_installed
    assert out["fake-header"].stdout == "@@cluster-tool 0000 plain 0 1 1@@\n"


def test_a_probe_that_hangs_is_cut_by_its_timeout() -> None:
    script, token = composite_script([Probe("slow", "sleep 30", timeout_s=1), Probe("ok", "true")])
    proc = subprocess.run(["sh", "-s"], input=script.encode(), capture_output=True, timeout=20)
    out = split_output(proc.stdout, token)
    assert out["slow"].rc == 124 and out["ok"].rc == 0


class Unreachable:
    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        raise TransportError("ssh: connect to host 10.0.0.9 port 22: No route to host")


def test_save_and_replay_round_trip(tmp_path: Path) -> None:
    probes = [Probe("hostname", "echo gpu001"), Probe("kernel", "echo 6.1.0")]
    results = collect([(Target("gpu001"), probes)], LocalTransport())
    down = collect([(Target("gpu002"), probes)], Unreachable())
    save_capture(tmp_path, {**results, **down})
    back = load_capture(tmp_path)
    assert back["gpu001"].outputs == results["gpu001"].outputs
    assert not back["gpu002"].reachable and "No route to host" in (back["gpu002"].error or "")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["hosts"]["gpu001"]["probes"] == ["hostname", "kernel"]
    assert (tmp_path / "gpu001" / "hostname.out").read_text() == "gpu001\n"
    assert not (tmp_path / "gpu002").exists()


def lab_capture(tmp_path: Path, *, swap: bool = False) -> Path:
    """A capture of the lab's four GPU nodes and its head, from real-format outputs."""
    cluster = load_spec(REPO / "examples" / "lab.yml")
    rendered = "\n".join(
        line
        for line in (REPO / "inventory" / "example" / "nccl.conf").read_text().splitlines()
        if not line.startswith("NCCL_SOCKET_IFNAME")
    )
    rendered += "\nNCCL_SOCKET_IFNAME==eth0\n"
    ibstat = read_real_output("ibstat_h100_ib_active_some_eth_down.txt").replace(
        "Rate: 400", "Rate: 200"
    )
    # The lab's GPUs sit where its profile puts them (cluster_lab builds them so).
    smi = smi_at(
        read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt"),
        cluster.profile("lab-h100-8x-hdr").gpu_pci,
    )
    fabric = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster), speed="HDR")
    fabric.model = "MQM8700"
    if swap:
        fabric.swap("gpu003", "mlx5_0", "mlx5_3")
    results: dict[str, HostResult] = {}
    for node in ("gpu001", "gpu002", "gpu003", "gpu004"):
        outputs = {
            "hostname": ProbeOutput(0, f"{node}\n"),
            "nvidia-smi-q": ProbeOutput(0, smi),
            "ibstat": ProbeOutput(0, ibstat),
            "kernel-log": ProbeOutput(0, "[    0.000000] Linux version 6.1.0-27-amd64\n"),
            "modules": ProbeOutput(0, "nvidia\nnvidia_peermem\n"),
            "nvidia-version": ProbeOutput(
                0, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.08\n"
            ),
            "kernel": ProbeOutput(0, "6.1.0-27-amd64\n"),
            "nccl-conf": ProbeOutput(0, rendered),
            "nvidia-smi-topo": ProbeOutput(0, _topo_for_profile()),
        }
        results[node] = HostResult(node, outputs=outputs, probes=tuple(outputs))
    results["head"] = HostResult(
        "head",
        outputs={
            "ibnetdiscover": ProbeOutput(0, fabric.text()),
            "ibqueryerrors": ProbeOutput(
                0,
                "\n## Summary: 45 nodes checked, 0 bad nodes found\n"
                "##          110 ports checked, 0 ports have errors beyond threshold\n",
            ),
        },
    )
    save_capture(tmp_path / "cap", results)
    return tmp_path / "cap"


def _topo_for_profile() -> str:
    """`nvidia-smi topo -m` of the HGX profile: each rail HCA PIX from its GPU."""
    profile = load_spec(REPO / "examples" / "lab.yml").gpu_profiles()["lab-h100-8x-hdr"]
    hcas = profile.compute_hcas
    cols = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(len(hcas))]
    lines = ["\t" + "\t".join(cols) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for g in range(8):
        row = ["X" if g == o else "NV18" for o in range(8)]
        row += ["PIX" if h.gpu == g else "SYS" for h in hcas]
        lines.append(f"GPU{g}\t" + "\t".join(row) + "\t0-55\t0\t\tN/A")
    for n, h in enumerate(hcas):
        row = ["PIX" if h.gpu == g else "SYS" for g in range(8)]
        row += ["X" if n == m else "SYS" for m in range(len(hcas))]
        lines.append(f"NIC{n}\t" + "\t".join(row))
    lines += ["", "NIC Legend:", ""]
    lines += [f"  NIC{n}: {h.device}" for n, h in enumerate(hcas)]
    return "\n".join(lines) + "\n"


def test_validate_replayed_from_a_capture_passes_then_names_a_swap(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    good = run_validate(cluster, replay=lab_capture(tmp_path / "good"), dcgm=False)
    assert [f for f in good.report.findings if f.fails] == []
    assert good.exit_code == 0
    bad = run_validate(cluster, replay=lab_capture(tmp_path / "bad", swap=True), dcgm=False)
    errors = [f for f in bad.report.findings if f.fails]
    assert [(f.check, f.node, f.component) for f in errors] == [
        ("fabric.swapped", "gpu003", "mlx5_0,mlx5_3")
    ]
    assert bad.exit_code == 1


def test_unreachable_hosts_are_findings_and_exit_3() -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    result = run_validate(cluster, transport=Unreachable(), nodes=["gpu002"], dcgm=False)
    assert result.exit_code == 3
    assert {(f.check, f.node) for f in result.report.findings} == {
        ("os.unreachable", "gpu002"),
        ("os.unreachable", "head"),
    }
    xml = ElementTree.fromstring(junit_xml(result))
    case = xml.find(".//testsuite[@name='gpu002']/testcase[@name='os.unreachable']")
    assert case is not None and case.find("failure") is not None
    passed = xml.find(".//testsuite[@name='gpu002']/testcase[@name='gpu.ecc']")
    assert passed is not None and passed.find("failure") is None


def test_junit_has_a_case_per_check_per_node(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    result = run_validate(cluster, replay=lab_capture(tmp_path, swap=True), dcgm=False)
    xml = ElementTree.fromstring(junit_xml(result))
    suites = {s.get("name") for s in xml.iter("testsuite")}
    assert suites == {"gpu001", "gpu002", "gpu003", "gpu004", "fabric"}
    failed = [c.get("name") for c in xml.iter("testcase") if c.find("failure") is not None]
    assert failed == ["fabric.swapped"]


class FakeSlurm:
    """Slurm as node-check sees it: one node's state and reason; records drains/resumes."""

    def __init__(self, state: str = "IDLE", reason: str = "", drained: bool = False) -> None:
        flags = frozenset({"DRAIN"}) if drained else frozenset()
        self.node = NodeState("gpu003", state, reason, flags)
        self.calls: list[tuple[str, str]] = []

    def node_states(self, nodes: Iterable[str] | None = None) -> list[NodeState]:
        return [self.node]

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        self.calls.append(("drain", reason))
        self.node = NodeState("gpu003", "IDLE", reason, frozenset({"DRAIN"}))

    def resume(self, nodes: Iterable[str]) -> None:
        self.calls.append(("resume", ""))
        self.node = NodeState("gpu003", "IDLE", "", frozenset())

    def submit(self, script: Path) -> str:
        raise AssertionError

    def job_states(self, job_ids: Sequence[str]) -> dict[str, object]:
        raise AssertionError

    def cancel(self, job_id: str) -> None:
        raise AssertionError


ECC = Finding(
    check="gpu.ecc",
    node="gpu003",
    component="GPU3",
    expected="<= 0",
    observed="2",
    message="gpu003 GPU3: volatile uncorrectable 2",
)


def test_node_check_drains_with_a_structured_reason_and_resumes_only_its_own() -> None:
    assert health_reason("gpu003", [ECC]) == "cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2"
    slurm = FakeSlurm()
    assert slurm_health_action("gpu003", [ECC], slurm).action == "drain"  # type: ignore[arg-type]
    assert slurm.node.reason == "cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2"
    assert slurm_health_action("gpu003", [ECC], slurm).action == "none"  # type: ignore[arg-type]
    # Healthy, but with no word on what ran: nothing counts as re-proven.
    assert slurm_health_action("gpu003", [], slurm).action == "kept"  # type: ignore[arg-type]
    resumed = slurm_health_action("gpu003", [], slurm, not_run={})  # type: ignore[arg-type]
    assert resumed.action == "resume"
    assert not slurm.node.drained
    pair = ECC.model_copy(update={"check": "nccl.pair", "message": "gpu003-gpu004 at 90 GB/s"})
    workflow_drains = (workflow_reason([pair]), workflow_reason([ECC]))
    assert workflow_drains[0].startswith("cluster-tool: nccl.pair")
    for reason in (
        "disk swap by ops",
        "cluster-tool: pending validation",
        "cluster-tool gate: x",
        *workflow_drains,  # a gate or validate-after drain: the workflow admits the node again
    ):
        other = FakeSlurm(reason=reason, drained=True)
        assert not may_lift(reason, Owner.HEALTH)
        assert slurm_health_action("gpu003", [], other).action == "left"  # type: ignore[arg-type]
        assert slurm_health_action("gpu003", [ECC], other).action == "left"  # type: ignore[arg-type]
        assert other.calls == []


def test_node_check_runs_the_probes_locally(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    node_file = tmp_path / "node.json"
    node_file.write_text(json.dumps(expectations_for(cluster, "gpu001").to_node_file()))
    proc = subprocess.run(
        [*CLI, "node-check", "--node-file", str(node_file), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    data = json.loads(proc.stdout)
    # This machine has no GPU and no HCA: the checks say so instead of crashing.
    assert proc.returncode == 1 and data["status"] == "fail"
    assert {"gpu.driver", "ib.count"} <= {f["check"] for f in data["findings"]}


def test_fabric_check_cli_exit_codes_and_json(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    fabric = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster), speed="HDR")
    fabric.model = "MQM8700"
    good = tmp_path / "good.txt"
    good.write_text(fabric.text())
    fabric.cut("gpu004", "mlx5_9")
    bad = tmp_path / "bad.txt"
    bad.write_text(fabric.text())
    spec = str(REPO / "examples" / "lab.yml")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, "fabric", "check", "--spec", spec, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert run("--ibnetdiscover", str(good)).returncode == 0
    proc = run("--ibnetdiscover", str(bad), "--json")
    assert proc.returncode == 1
    findings = json.loads(proc.stdout)["findings"]
    assert [(f["check"], f["node"], f["component"]) for f in findings] == [
        ("fabric.link-down", "gpu004", "mlx5_9")
    ]
    broken = run("--ibnetdiscover", spec)
    assert broken.returncode == 2 and broken.stderr.startswith(f"{spec}:1:")


def test_validate_cli_replays_a_capture_and_writes_junit(tmp_path: Path) -> None:
    capture = lab_capture(tmp_path, swap=True)
    junit = tmp_path / "out" / "junit.xml"
    proc = subprocess.run(
        [*CLI, "validate", str(REPO / "examples" / "lab.yml"), "--from", str(capture),
         "--junit", str(junit), "--no-dcgm", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "fail" and report["unreachable"] == []
    assert report["findings"][0]["check"] == "fabric.swapped"
    assert ElementTree.parse(junit).getroot().get("failures") == "1"
    usage = subprocess.run(
        [*CLI, "validate", "--spec", str(REPO / "examples" / "lab.yml"), "--from",
         str(capture), "--save", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert usage.returncode == 2 and "exclude each other" in usage.stderr
