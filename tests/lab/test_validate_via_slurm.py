"""`validate --via slurm` on the converged lab: the node checks as one real Slurm job step (srun
on the head, `cluster-tool node-check --json` as installed on every GPU node by the
cluster_tool_node role, records in the lab's shared folder) give the same findings as the SSH
fan-out, with a GPU fault on one node."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged


def finding_set(report: dict[str, Any]) -> set[tuple[str, str | None, str | None, str]]:
    return {(f["check"], f["node"], f["component"], f["severity"]) for f in report["findings"]}


def test_validate_via_slurm_gives_the_ssh_fan_outs_findings(converged: Converged) -> None:
    fault = converged.inject("gpu-ecc", "gpu002", "3")
    try:
        started = time.monotonic()
        spec = str(converged.lab.spec)
        rc_ssh, over_ssh, err = converged.run_json("validate", spec, "--health", "--no-dcgm")
        ssh_s = time.monotonic() - started
        rc_step, stepped, err_step = converged.run_json(
            "validate", spec, "--health", "--no-dcgm", "--via", "slurm"
        )
        step_s = time.monotonic() - started - ssh_s
    finally:
        converged.heal(fault)
    assert over_ssh, err[-2000:]
    assert stepped, err_step[-2000:]
    # Every GPU node ran in the one step: none was left to SSH.
    step = stepped["summary"]["slurm_step"]
    assert step["nodes"] == 4 and step["over_ssh"] == {}, step
    assert stepped["unreachable"] == [], stepped["findings"]
    ecc = {f for f in finding_set(stepped) if f[0] == "gpu.ecc"}
    assert ecc and {f[1] for f in ecc} == {"gpu002"}, stepped["findings"]
    assert ("gpu.ecc", "gpu002", "GPU3", "error") in ecc
    assert finding_set(stepped) == finding_set(over_ssh)
    assert rc_step == rc_ssh == 1
    print(f"validate --health: over SSH {ssh_s:.1f} s, as one Slurm step {step_s:.1f} s")
