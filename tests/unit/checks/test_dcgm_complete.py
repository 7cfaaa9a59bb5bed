"""DCGM proves a node only with a complete run (issue 30, item 5): a table cut off before its
closing border, one that lists no test, one whose every test (or every GPU test) was skipped, a
`-r 3` that ran only the deployment checks, and a run killed by its timeout are
`gpu.dcgm-incomplete`, so the node is `unknown`, never `pass`; a Fail row such a run printed is
still `gpu.dcgm`. The burn-in's `dcgmi diag -r 3` is judged the same way.

Every table here is real text: the complete DCGM 3.3.9 H200 run (ramble's example output, with
its own `EUD Test: Skip - All`, which a complete run has), the DCGM 4.2.3 run cut off in
NVIDIA/DCGM#253, and the DCGM 4.4.2 GB10 `-r 3` whose GPU tests were all skipped; the other
variants are cut from or edited in the 3.3.9 text below, each saying how. NVIDIA/DCGM#55 shows
a real DCGM 3.0.4 `dcgmi diag -r 3` printing its deployment block and then `Skip` for the tests
beyond level 1, which is the 3.x variant here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster_tool.checks.health import check_dcgm
from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.findings import Finding
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult
from cluster_tool.spec import load_spec
from cluster_tool.verdicts import Proof, judge_nodes
from cluster_tool.workflows import burnin
from cluster_tool.workflows.burnin import BurnInLive, DcgmiDiagLevel
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import FIXTURES, REPO, read_real_output
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

REAL = read_real_output("dcgmi_diag_table_dcgm3.3.9_h200_level3style_ramble.txt")
LINES = REAL.splitlines()
BORDER = "+---------------------------+------------------------------------------------+"


def own(folder: str, name: str) -> str:
    return (FIXTURES / "parsers" / folder / name).read_text().split("\n", 1)[1]


def until(test: str) -> str:
    """The real table up to and including `test`'s row: a capture cut off there."""
    at = next(i for i, line in enumerate(LINES) if line.startswith(f"| {test} "))
    return "\n".join(LINES[: at + 1]) + "\n"


def verdicts_skipped(*, deployment: bool) -> str:
    """The real table with every GPU test's verdict (and, with `deployment`, every deployment
    check's too) replaced by DCGM's own `Skip` in the same cell width."""
    out, category = [], ""
    for line in LINES:
        cat = re.match(r"^[|+]-----  (\w+)", line)
        category = cat[1] if cat else category
        if line.startswith("| ") and category not in ("", "Metadata"):
            verdict = "Skip" if category == "Deployment" else "Skip - All"
            if category != "Deployment" or deployment:
                line = line[:30] + f"{verdict:<47}|"
        out.append(line)
    return "\n".join(out) + "\n"


def only(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def verdict(findings: list[Finding]) -> str:
    proof = Proof()
    proof.add("health", ["gpu001"])
    return judge_nodes(["gpu001"], findings, proof, required=("health",))["gpu001"].verdict


def test_the_complete_real_run_is_a_clean_pass_at_its_level() -> None:
    assert check_dcgm("gpu001", parse_dcgmi_diag(REAL)) == []
    findings = check_dcgm("gpu001", parse_dcgmi_diag(REAL), level=3)
    assert findings == []
    assert verdict(findings) == "pass"


def test_a_table_cut_off_before_its_closing_border_is_incomplete_not_a_pass() -> None:
    # Cut after `GPU Memory`: Diagnostic and the stress tests never reached the capture.
    findings = check_dcgm("gpu001", parse_dcgmi_diag(until("GPU Memory")))
    (gap,) = only(findings, "gpu.dcgm-incomplete")
    assert (gap.severity, gap.node, gap.component, gap.observed) == (
        "error",
        "gpu001",
        "dcgmi-diag",
        "cut off",
    )
    assert "'GPU Memory'" in gap.message
    assert only(findings, "gpu.dcgm") == []
    assert verdict(findings) == "unknown"


def test_a_cut_off_run_keeps_its_real_failure_and_is_still_incomplete() -> None:
    # NVIDIA/DCGM#253: pcie Fail, then the capture ends without the closing border.
    text = own("nvidia", "dcgmi_diag_dcgm4.2.3_pcie_internal_error_truncated.txt")
    findings = check_dcgm("gpu001", parse_dcgmi_diag(text))
    assert [(f.check, f.observed) for f in findings] == [
        ("gpu.dcgm", "Fail"),
        ("gpu.dcgm-incomplete", "cut off"),
    ]
    assert verdict(findings) == "fail"


def test_a_table_with_no_test_is_incomplete() -> None:
    # The real header and Metadata block, then the closing border: no test row at all.
    text = "\n".join(LINES[: LINES.index("|-----  Deployment  --------+" + "-" * 48 + "|")])
    findings = check_dcgm("gpu001", parse_dcgmi_diag(text + "\n" + BORDER + "\n"))
    assert [(f.check, f.observed) for f in findings] == [("gpu.dcgm-incomplete", "no test")]


def test_every_test_skipped_is_incomplete() -> None:
    findings = check_dcgm("gpu001", parse_dcgmi_diag(verdicts_skipped(deployment=True)))
    assert [(f.check, f.observed) for f in findings] == [("gpu.dcgm-incomplete", "every test Skip")]
    assert "16 tests" in findings[0].message


def test_gpu_tests_all_skipped_after_passing_deployment_is_incomplete_in_3x_and_4x() -> None:
    # 3.x: the deployment checks pass, PCIe to EUD all `Skip - All` (NVIDIA/DCGM#55's run).
    three = check_dcgm("gpu001", parse_dcgmi_diag(verdicts_skipped(deployment=False)))
    # 4.x: the real GB10 `-r 3`: software Pass, memory ... targeted_power Skip.
    gb10 = own("real", "dcgmi_diag_dcgm4.4.2_r3_gb10_all_skip_no_top_border.txt")
    four = check_dcgm("gpu001", parse_dcgmi_diag(gb10))
    for findings in (three, four):
        assert [(f.check, f.observed) for f in findings] == [
            ("gpu.dcgm-incomplete", "every GPU test Skip")
        ]
        assert verdict(findings) == "unknown"
    assert "memory, diagnostic, nvbandwidth, pcie" in four[0].message


def test_a_level_3_run_that_printed_only_the_deployment_checks_is_incomplete() -> None:
    # What `-r 1` prints: the real header, Metadata and Deployment block, then the border.
    deployment = until("Inforom") + BORDER + "\n"
    assert check_dcgm("gpu001", parse_dcgmi_diag(deployment), level=1) == []
    findings = check_dcgm("gpu001", parse_dcgmi_diag(deployment), level=3)
    assert [(f.check, f.observed) for f in findings] == [
        ("gpu.dcgm-incomplete", "deployment checks only")
    ]
    assert "-r 3" in findings[0].message


def test_a_gpu_that_every_gpu_test_skipped_is_not_diagnosed() -> None:
    # The real run with GPU 7 split out of every `- All` group as DCGM 3.x prints groups
    # (`Pass - GPUs: 0, 1, ...` then `Skip - GPU: 7` on a continuation row).
    out = []
    for line in LINES:
        m = re.match(r"^(\| [^|]+\| )(Pass|Skip) - All\s*\|$", line)
        if m is None:
            out.append(line)
            continue
        out.append(f"{m[1]}{m[2] + ' - GPUs: 0, 1, 2, 3, 4, 5, 6':<47}|")
        out.append(f"|{'':27}| {'Skip - GPU: 7':<47}|")
    findings = check_dcgm("gpu001", parse_dcgmi_diag("\n".join(out) + "\n"))
    assert [(f.check, f.component) for f in findings] == [("gpu.dcgm-incomplete", "GPU7")]


def _node_findings(output: ProbeOutput, probe: DcgmiDiagLevel | None = None) -> list[Finding]:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    expect = expectations_for(cluster, "gpu001")
    return [
        f
        for f in check_node(expect, {"dcgmi-diag": output}, **({"dcgm": probe} if probe else {}))
        if f.check.startswith("gpu.dcgm")
    ]


@pytest.mark.parametrize("rc", [124, 137])
def test_a_run_killed_by_its_timeout_is_incomplete_whatever_it_printed(rc: int) -> None:
    # `timeout -k 5` exits 124 when it stopped dcgmi, 137 when it had to SIGKILL it.
    printed = _node_findings(ProbeOutput(rc, REAL))
    assert [(f.check, f.observed) for f in printed] == [("gpu.dcgm-incomplete", f"exit {rc}")]
    assert "killed by its 600 s timeout" in printed[0].message
    silent = _node_findings(ProbeOutput(rc, ""))
    assert [(f.check, f.observed) for f in silent] == [("gpu.dcgm-incomplete", f"exit {rc}")]
    assert verdict(silent) == "unknown"


def test_a_killed_run_keeps_the_failures_it_printed() -> None:
    text = own("nvidia", "dcgmi_diag_dcgm3_r2_gpu0_thermal_fail.txt")
    findings = _node_findings(ProbeOutput(124, text))
    assert {f.check for f in findings} == {"gpu.dcgm", "gpu.dcgm-incomplete"}
    assert verdict(findings) == "fail"


def test_the_burn_ins_level_3_run_is_held_to_level_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The burn-in's node checks after the soak read `dcgmi diag -r 3`: a table with only the
    deployment checks in it (what `-r 1` prints) does not pass the burn-in."""
    deployment = until("Inforom") + BORDER + "\n"
    direct = _node_findings(ProbeOutput(0, deployment), DcgmiDiagLevel(3))
    assert [(f.check, f.observed) for f in direct] == [
        ("gpu.dcgm-incomplete", "deployment checks only")
    ]

    def collected(jobs, transport, **kwargs):  # type: ignore[no-untyped-def]
        assert all("dcgmi diag -r 3" in [p.command() for p in probes] for _, probes in jobs)
        return {
            t.name: HostResult(t.name, outputs={"dcgmi-diag": ProbeOutput(0, deployment)})
            for t, _ in jobs
        }

    monkeypatch.setattr(burnin, "collect", collected)
    monkeypatch.setattr(burnin, "save_capture", lambda *a, **k: None)
    live = BurnInLive(
        cluster=load_spec(REPO / "examples" / "lab.yml"),
        inventory=tmp_path,
        record=RunRecord.create(tmp_path / "runs", "validate-after", {}),
        slurm=admin_slurm(SlurmCluster(["gpu001"])),
        burn_in_s=20.0,
    )
    monkeypatch.setattr(live, "_transport", lambda: None)
    found = live._after_soak(["gpu001"])
    assert [(f.check, f.node) for f in found if f.check.startswith("gpu.dcgm")] == [
        ("gpu.dcgm-incomplete", "gpu001")
    ]
