"""The burn-in rung on the emulated cluster (issue 20): `validate-after --nodes gpu[001-004]
--admit --burn-in 20s` runs the gate, then the NCCL soak as one Slurm job (pairs rotating,
the simulated all_reduce_perf honouring -N and reading the hardware model every cycle), then
`dcgmi diag -r 3` on the soaked nodes. gpu003 is slowed (`slow-node gpu003 0.8`) once the
soak's second step has started: it is `burnin.sag` and stays drained with that id in its
reason. gpu001's rail-0 cable is cut from the third step to the sixth (issue 30, item 3): its
steps end in NCCL's `NET/IB : Got completion ... status=12`, with three partners in turn, so it
is `burnin.step-failed` and held, while the partners it failed with, which ran clean with the
others, are admitted. On a tree without `--burn-in` the command is exit 2."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.conftest import Converged

SLOW = "gpu003"
CUT = ("gpu001", "mlx5_0")


def burnin_spec(c: Converged) -> Path:
    """The lab's spec with all_reduce alone in the gate (a shorter gate before the soak)."""
    spec = c.gate_root / "lab-burnin.yml"
    data = yaml.safe_load(c.lab.spec.read_text())
    data.setdefault("nccl", {}).setdefault("tests", {})["collectives"] = ["all_reduce"]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _soak_step_started(workdir: Path, step: int) -> bool:
    marker = f"# cluster-tool soak: step {step} at "
    for path in workdir.glob("burnin-*/soak.*.out"):
        try:
            if marker in path.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


@pytest.mark.converged
def test_a_node_slowed_mid_soak_is_burnin_sag_and_stays_out_the_others_are_admitted(
    converged: Converged,
) -> None:
    c = converged
    spec = burnin_spec(c)
    workdir = c.gate_root / f"burnin-test-{time.monotonic_ns()}"
    done: dict[str, Any] = {}

    def validate() -> None:
        done["result"] = c.run_json(
            "validate-after", str(spec), "--nodes", "gpu[001-004]", "--admit", "--no-dcgm",
            "--burn-in", "20s", "--ssh-config", str(c.lab.ssh_config), "--slurm-via", "head",
            "--gate-workdir", str(workdir), timeout=600,
        )  # fmt: skip

    def at_step(step: int) -> None:
        while runner.is_alive() and not _soak_step_started(workdir, step):
            time.sleep(0.3)

    started = time.monotonic()
    runner = threading.Thread(target=validate)
    runner.start()
    fault = cut = None
    try:
        # Mid-soak: once its second step (the first after the baseline step) has begun.
        at_step(1)
        injected_at = time.monotonic() - started
        fault = c.inject("slow-node", SLOW, "0.8")
        at_step(2)
        cut = c.inject("link-down", *CUT)
        at_step(5)
        c.heal(cut)
        cut = None
        runner.join(timeout=600)
    finally:
        for f in (cut, fault):
            if f is not None:
                c.heal(f)
    took = time.monotonic() - started
    rc, summary, err = done["result"]
    assert summary.get("run_dir"), err[-3000:]
    run_dir = Path(summary["run_dir"])
    findings = json.loads((run_dir / "findings.json").read_text())["findings"]
    errors = [(f["check"], f["node"]) for f in findings if f["severity"] == "error"]
    cut_node = CUT[0]
    try:
        assert rc == 1, (errors, err[-3000:])
        assert ("burnin.sag", SLOW) in errors, (errors, err[-3000:])
        assert ("burnin.step-failed", cut_node) in errors, (errors, err[-3000:])
        # The cut cable may also show in the counters read after the soak; nothing else fails.
        assert {n for _, n in errors} == {SLOW, cut_node}, (errors, err[-3000:])
        failed_steps = [
            f for f in findings if f["check"] == "burnin.step-failed" and f["node"] == cut_node
        ]
        assert any("status=12" in f["message"] for f in failed_steps), failed_steps
        assert len({f["observed"].rsplit(" with ", 1)[1] for f in failed_steps}) >= 2
        nodes = json.loads((run_dir / "summary.json").read_text())["nodes"]
        for held in (SLOW, cut_node):
            assert nodes[held]["verdict"] == "fail" and nodes[held]["admitted"] is False, nodes
        for other in ("gpu002", "gpu004"):
            assert nodes[other]["verdict"] == "pass" and nodes[other]["admitted"], nodes[other]
        states = c.sinfo()
        assert states[SLOW][0] in ("drained", "draining"), states[SLOW]
        assert "burnin.sag" in states[SLOW][1], states[SLOW]
        assert states[cut_node][0] in ("drained", "draining"), states[cut_node]
        assert states[cut_node][1].startswith("cluster-tool: "), states[cut_node]
        assert all(states[n][0] not in ("drained", "draining") for n in ("gpu002", "gpu004")), (
            states
        )
        soaks = sorted(run_dir.glob("burnin-soak-*.json"))
        samples = json.loads(soaks[-1].read_text())["samples"]
        steps = max(s["step"] for s in samples) + 1
        print(
            f"burn-in lab test: {took:.1f} s (slow-node injected at {injected_at:.1f} s), "
            f"{steps} soak steps, {len(samples)} samples"
        )
    finally:
        c.lab.ssh("head", f"scontrol update nodename={SLOW},{cut_node} state=resume")
