"""A 1,024-node validation as the workflows record it, for the report at fleet scale: the
h200-4su example's cabling grown to gpu[0001-1024] (32 SUs), its link matrix from that plan
(`fabric.links.link_matrix`), raw BER from the link check (`checks.link.check_mlxlink`), and the
gate's busbw rows from the workflows' `RecordingRunner` reading real nccl-tests captures scaled
per node (tests/unit/gate/fakes.py). What may be planted: one slow node-rail (gpu0513 rail 3)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from cluster_tool.checks.link import check_mlxlink
from cluster_tool.fabric.links import link_matrix
from cluster_tool.fabric.plan import CablingRow, FabricPlan, cabling_plan, plan_for
from cluster_tool.findings import Finding
from cluster_tool.gate.plan import GateJob, NcclTestParams, multi_node_job, rails_job, single_job
from cluster_tool.gate.runner import JobRun, SlurmRunner
from cluster_tool.gate.thresholds import GateProfile, Rung, Thresholds
from cluster_tool.parsers.mlxlink import MlxlinkPort
from cluster_tool.spec import load_spec
from cluster_tool.spec.thresholds import HealthThresholds
from cluster_tool.workflows import common
from cluster_tool.workflows.common import RecordingRunner
from cluster_tool.workflows.runs import RunSummary
from tests.conftest import REPO
from tests.unit.gate.fakes import SINGLE, pair_output, scaled_output

NODES = tuple(f"gpu{i:04d}" for i in range(1, 1025))
SLOW_NODE, SLOW_RAIL = "gpu0513", 3
SLOW_PARTNER = "gpu0514"  # the rails rung pairs gpu(2k-1) with gpu(2k)
BER_NODE = "gpu0042"
NO_BER_NODE = "gpu1024"
HOT_NODES = NODES[:1000]  # one warning each, the same id: one row of the findings table
THRESHOLDS = Thresholds(GateProfile(), min_fraction=0.85)
PARAMS = NcclTestParams()


def fleet_plan() -> FabricPlan:
    """The fabric plan of 1,024 nodes as a rendered cabling.csv would give it: the h200-4su
    example's HCA per rail (its gpu001 rows), 32 nodes per SU, one leaf per rail per SU. (The
    spec itself stops at what a two-level fat tree of 64-port switches carries.)"""
    cluster = load_spec(REPO / "examples" / "h200-4su.yml")
    template = [r for r in cabling_plan(cluster) if r.node == "gpu001"]
    assert len(template) == 8
    rows = [
        CablingRow(
            node=node,
            hca=t.hca,
            gpu=t.gpu,
            rail=t.rail,
            su=i // 32 + 1,
            leaf=cluster.fabric.leaf_name(i // 32 + 1, t.rail),
            leaf_port=i % 32 + 1,
        )
        for i, node in enumerate(NODES)
        for t in template
    ]
    return plan_for(cluster, rows=rows, links=[])


def _pace(node: str) -> float:
    """Each node's speed: a spread of +-3 % around the captures' (a fleet is never flat)."""
    return (0.97, 0.985, 1.0, 1.01, 1.025, 0.99, 1.005)[int(node[3:]) % 7]


@functools.cache
def _single(pace: float) -> str:
    return scaled_output(SINGLE, pace)


@functools.cache
def _pair(pace: float) -> str:
    return pair_output(pace)


def _texts(job: GateJob, slow: bool) -> dict[str, str | None]:
    pace = min(_pace(n) for n in job.nodes)
    texts: dict[str, str | None] = {}
    for step in job.steps:
        if job.rung is Rung.SINGLE_NVLS:
            texts[step.label] = _single(pace)
            continue
        planted = slow and SLOW_NODE in job.nodes and step.rail in (None, SLOW_RAIL)
        # One rail carries an eighth of the pair's bandwidth; the planted rail 60 % of that.
        scale = 0.6 if planted else 1.0
        texts[step.label] = _pair(round(pace * scale * (0.125 if step.rail is not None else 1), 4))
    return texts


@dataclass
class _AlreadyRan(SlurmRunner):
    """Slurm's side of the gate, done: every job completed and printed its capture."""

    slow: bool = True

    def run(self, jobs: Sequence[GateJob]) -> list[JobRun]:
        return [
            JobRun(job, str(7000 + i), "COMPLETED", texts=_texts(job, self.slow))
            for i, job in enumerate(jobs)
        ]


@dataclass
class _Recorded(RecordingRunner, _AlreadyRan):
    """The workflows' recorder over that finished Slurm: the report's busbw rows as a
    validation writes them into summary.json."""


def gate_rows(tmp: Any, slow: bool) -> list[dict[str, Any]]:
    runner = _Recorded(
        slurm=None,  # type: ignore[arg-type]  # never asked: the jobs already ran
        workdir=tmp,
        params=PARAMS,
        gpus_per_node=8,
        thresholds=THRESHOLDS,
        slow=slow,
    )
    pairs = [NODES[i : i + 2] for i in range(0, len(NODES), 2)]
    jobs: list[GateJob] = [single_job(n, PARAMS) for n in NODES]
    jobs += [multi_node_job(f"pair-{a}-{b}", Rung.PAIRS, (a, b), PARAMS) for a, b in pairs]
    jobs += [rails_job(f"rails-{a}-{b}", (a, b), THRESHOLDS.profile) for a, b in pairs]
    runner.run(jobs)
    return runner.busbw


def fleet_findings(plan_rows: Sequence[Any]) -> list[Finding]:
    """A link.ber warning on gpu0042's rail-5 HCA (raw BER 3e-06 through the link check, under
    a site's own NDR raw-BER limit), and a gpu.temperature warning on each of 1,000 nodes."""
    hca = next(r.hca for r in plan_rows if r.node == BER_NODE and r.rail == 5)
    port = MlxlinkPort(line_no=1, device=hca, speed="IB-NDR", raw_ber=3e-6)
    limits = {"ib_link_quality": {"ndr": {"raw_ber_warn": 1e-6}}}
    found = check_mlxlink(BER_NODE, [port], HealthThresholds.model_validate(limits))
    assert [f.check for f in found] == ["link.ber"]
    found += [
        Finding(
            check="gpu.temperature",
            severity="warning",
            node=node,
            component="GPU 3",
            expected="<= 83 C",
            observed="84 C",
            message=f"{node} GPU 3 at 84 C",
        )
        for node in HOT_NODES
    ]
    return found


def fleet_run(tmp: Any, slow: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """summary.json and findings.json of the run, as RunRecord.finish hands them over."""
    plan = fleet_plan()
    findings = fleet_findings(plan.rows)
    links = link_matrix(plan, NODES, findings, fabric_checked=True)
    summary = RunSummary(
        command="validate",
        run_id="20261201T120000Z-fleet",
        started="2026-12-01T12:00:00Z",
        inputs={"spec": "h200-1024.yml"},
        phases=[{"name": "gate", "status": "passed", "elapsed_s": 812.0, "detail": None}],
        nodes={n: {"verdict": "pass"} for n in NODES},
        checks={n: ["gpu.temperature", "link.ber", "nccl.single"] for n in NODES},
        # The link check did not reach gpu1024: its BER is not known.
        skipped={NO_BER_NODE: {"link.ber": "mlxlink did not answer"}},
        links=links,
        busbw=gate_rows(tmp, slow),
        verdict="pass",
        headline="PASS",
        exit_code=0,
    )
    return summary.to_json(), [f.model_dump() for f in findings]


@pytest.fixture
def cached_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The recorder parses every step's output; the fleet's ~6,700 steps print a dozen
    distinct texts, so parse each once."""
    monkeypatch.setattr(
        common, "parse_nccl_tests", functools.lru_cache(maxsize=None)(common.parse_nccl_tests)
    )
    yield
