"""The burn-in rung (`--burn-in DURATION`): after the gate, on the nodes it did not fail and
inside its reservation, the NCCL soak (gate/soak.py) and then the node checks again with
`dcgmi diag -r 3` (or 4) in place of `-r 1`, which also read the Xids the soak left in the kernel
log. Its findings join the gate's, so the one admission rule keeps a failing node out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster_tool.checks.node import FleetExpectations, check_node
from cluster_tool.fileio import fresh_dir
from cluster_tool.findings import Finding
from cluster_tool.gate.from_spec import gate_inputs
from cluster_tool.gate.soak import (
    SagRule,
    SoakResult,
    SoakRunner,
    judge_soak,
    judge_steps,
    plan_soak,
)
from cluster_tool.probes import Probe
from cluster_tool.probes.node import HEALTH_PROBES, DcgmiDiag
from cluster_tool.remote.fanout import Target, collect, save_capture
from cluster_tool.slurm import SlurmError
from cluster_tool.spec.models import Cluster
from cluster_tool.verdicts import GateProof
from cluster_tool.workflows.common import GateOutcome
from cluster_tool.workflows.live import PENDING_S, Live


def burn_in_seconds(text: str | None, cluster: Cluster, command: str) -> float:
    """`--burn-in`'s value as seconds (0: no burn-in); `default` is the spec's length for the
    command (bring-up: `bringup_minutes`, else `reimage_minutes`)."""
    from cluster_tool.gate.soak import parse_duration

    if text is None:
        return 0.0
    if text.strip().lower() == "default":
        t = cluster.thresholds.burn_in
        return 60.0 * (t.bringup_minutes if command == "bringup" else t.reimage_minutes)
    return parse_duration(text)


class DcgmiDiagLevel(DcgmiDiag):
    """DCGM's diagnostic at the burn-in's level, filed where the node checks read `-r 1`'s."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.timeout_s = 3600 if level >= 3 else 600  # -r 3 runs ~30 min on 8 GPUs, -r 4 longer


def burn_in_probes(level: int) -> tuple[Probe, ...]:
    return tuple(DcgmiDiagLevel(level) if p.name == DcgmiDiag.name else p for p in HEALTH_PROBES)


@dataclass
class BurnInLive(Live):
    """The live edges with the burn-in after every gate run (`burn_in_s` > 0)."""

    burn_in_s: float = 0.0
    soaks: list[dict[str, Any]] = field(default_factory=list)

    def gate(self, nodes: Sequence[str], rungs: tuple[str, ...] | None = None) -> GateOutcome:
        outcome = super().gate(nodes, rungs)
        if self.burn_in_s <= 0:
            return outcome
        failed = {f.node for f in outcome.findings if f.fails}
        soaked = [n for n in nodes if n not in failed]
        if not soaked:
            return outcome
        before = len(self.soaks)
        found = self.burn_in(soaked)
        # Each soaked pair that no burn-in error names is a multi-node job that passed: proof
        # for both (a node whose gate partner sagged is proven by its other partners).
        bad = {f.node for f in found if f.fails}
        clean = [tuple(p) for s in self.soaks[before:] for p in _pairs(s) if not set(p) & bad]
        proof = GateProof(list(outcome.proof.single), [*outcome.proof.jobs, *clean])
        return GateOutcome(outcome.findings + found, outcome.busbw, proof)

    def burn_in(self, nodes: Sequence[str]) -> list[Finding]:
        """The soak on `nodes`, judged; then their node checks with DCGM at the burn-in level."""
        findings = self._soak(nodes)
        findings += self._after_soak(nodes)
        return findings

    def _soak(self, nodes: Sequence[str]) -> list[Finding]:
        t = self.cluster.thresholds.burn_in
        rule = SagRule(t.baseline_samples, t.sag_max, t.fleet_floor)
        if len(nodes) < 2:
            return [_unread(n, "a node alone has no partner to soak with") for n in nodes]
        inputs = gate_inputs(self.cluster)
        workdir = (self.gate_workdir or self.record.path / "gate-work").resolve()
        runner = SoakRunner(
            slurm=self.slurm,
            workdir=fresh_dir(workdir, "burnin-"),
            params=inputs.params,
            gpus_per_node=inputs.thresholds.profile.gpus_per_node,
            watchdog_s=inputs.watchdog_s,
            pending_s=PENDING_S,
            poll_s=2.0 if self.burn_in_s < 300 else 10.0,
        )
        su = {n.name: n.su or 0 for n in self.cluster.gpu_nodes()}
        plan = plan_soak(
            nodes,
            self.burn_in_s,
            message_bytes=t.message_bytes,
            cycles=t.cycles_per_step,
            su_of=su,
        )
        try:
            result: SoakResult = runner.soak(plan)
        except SlurmError as exc:
            return [_unread(n, f"the soak job did not run: {exc}") for n in nodes]
        data = result.to_json()
        self.soaks.append(data)
        self.record.write_json(f"burnin-soak-{len(self.soaks)}.json", data)
        return judge_soak(nodes, result.samples, rule) + judge_steps(result)

    def _after_soak(self, nodes: Sequence[str]) -> list[Finding]:
        level = self.cluster.thresholds.burn_in.dcgm_level
        probes = burn_in_probes(level)
        address = {h.name: h.address for h in self.cluster.hosts()}
        results = collect(
            [(Target(n, address.get(n)), probes) for n in nodes],
            self._transport(),
            concurrency=self.concurrency,
            timeout=max(p.timeout_s for p in probes) + 60.0,
        )
        self._captures += 1
        save_capture(self.record.raw_dir() / f"{self._captures:02d}-burnin", results)
        expectations = FleetExpectations(self.cluster)
        findings: list[Finding] = []
        for n in nodes:
            result = results[n]
            if not result.reachable:
                findings.append(
                    Finding(
                        check="os.unreachable",
                        node=n,
                        expected="reachable over SSH",
                        observed=result.error,
                        message=f"{n}: unreachable after the soak: {result.error}",
                    )
                )
                continue
            findings += check_node(expectations(n), result.outputs, dcgm=DcgmiDiagLevel(level))
        return findings


def _pairs(soak: dict[str, Any]) -> list[tuple[str, ...]]:
    """The pairs that gave samples in a soak's record."""
    samples = soak.get("samples", [])
    return sorted({tuple(s["pair"]) for s in samples if isinstance(s, dict)})


def _unread(node: str, why: str) -> Finding:
    return Finding(
        check="burnin.unread",
        node=node,
        component="soak all_reduce",
        expected="busbw samples over the soak",
        observed=why,
        message=f"{node}: {why}",
    )
