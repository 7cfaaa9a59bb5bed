"""The three jobs end to end, one entry point each: `run_bringup`, `run_reimage` and
`run_validate_after` create the run record, do the work through the live edges, write
summary.json (a `RunSummary`), findings.json, JUnit and the report, and return a `RunOutcome`.
The commands only parse options, call one of them and print."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ClusterShell.NodeSet import NodeSet

from cluster_tool.context import Reach
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.slurm import (
    JobState,
    NodeState,
    RunningJob,
    SlurmAdmin,
    SlurmError,
    connect,
)
from cluster_tool.spec.models import Cluster
from cluster_tool.workflows.runs import (
    RunRecord,
    RunSummary,
    default_runs_dir,
    last_failed,
    run_secrets,
)

if TYPE_CHECKING:
    from cluster_tool.bmc import Credentials, TlsPolicy
    from cluster_tool.redact import Secrets

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


@dataclass
class RunOutcome:
    """A finished job: its run record and the summary it wrote there."""

    record: RunRecord
    summary: RunSummary
    findings: list[Finding] = field(default_factory=list)  # as findings.json holds them

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code

    @property
    def report(self) -> Path:
        return self.record.path / "report.html"


def _finish(record: RunRecord, summary: RunSummary, findings: list[Finding]) -> RunOutcome:
    record.finish(summary, findings)
    return RunOutcome(record, summary, findings)


def _finish_measured(
    cluster: Cluster, record: RunRecord, summary: RunSummary, findings: list[Finding]
) -> RunOutcome:
    """Finish a run that measured nodes (bring-up, re-image, validate-after): its nodes judged
    against their own history and the run added to it first, so that a node's baseline starts
    at its bring-up. History gives warnings only: the run's verdict stands. A replay (`--from`)
    is neither judged nor recorded."""
    from cluster_tool.history import judge_and_record

    history = judge_and_record(record.path, summary.to_json(), cluster.thresholds.history)
    return _finish(record, summary, findings + history)


def _inventory(cluster: Cluster, given: Path | None, record: RunRecord, check: bool) -> Path:
    """The inventory a converge uses: the one given, else the spec rendered now (with --check
    the rendered one as it is, its diff against the spec kept in the record)."""
    from cluster_tool.render import diff_rendered, render
    from cluster_tool.render.engine import default_out_dir

    if given is not None:
        if not given.exists():
            raise UsageError(f"--inventory {given}: no such inventory")
        return given
    out = default_out_dir(cluster)
    if check:
        diff = diff_rendered(cluster, out)
        record.write_text("raw/render.diff", "".join(diff.diff))
        if not (out / "hosts.yml").is_file():
            raise UsageError(f"--check: {out} is not rendered yet; run `cluster-tool render` first")
        return out
    result = render(cluster, out)
    record.write_json("raw/render.json", result.to_json())
    return out


def _preflight(
    cluster: Cluster,
    hosts: Sequence[str],
    reach: Reach,
    progress: Progress,
    spec: Path,
    *,
    secrets: bool = True,
    hardware: bool = True,
    slurm: SlurmAdmin | None = None,
) -> None:
    """A job's preflight, before a run record, Ansible or a drain: the secrets a converge reads
    (when `secrets`), every one of `hosts` answering SSH with the OS the spec pins, each GPU
    node's hardware against its profile (when `hardware`), Slurm (when given).
    PreflightFailed lists every problem."""
    from cluster_tool.workflows import preflight

    result = preflight.run_preflight(
        cluster,
        hosts,
        preflight.ssh_transport(cluster, reach.ssh_config),
        slurm=slurm,
        secrets=secrets,
        hardware=hardware,
        spec=str(spec),
    )
    progress(f"preflight: {', '.join(f'{k} {v}' for k, v in result.checked.items())}")
    if result.problems:
        raise preflight.PreflightFailed(result)


def _limited(cluster: Cluster, limit: str | None) -> list[str]:
    """The hosts `limit` names (a hostlist), else all; a group name: every host."""
    from cluster_tool.bounds import expand_hostlist

    hosts = [h.name for h in cluster.hosts()]
    if limit:
        named = set(expand_hostlist(limit, "--nodes"))
        hosts = [h for h in hosts if h in named] or hosts
    return hosts


def _burn_in(text: str | None, cluster: Cluster, command: str, gate: bool) -> float:
    """--burn-in as seconds (0: none); it runs after the gate, so it needs the gate."""
    from cluster_tool.workflows.burnin import burn_in_seconds

    seconds = burn_in_seconds(text, cluster, command)
    if seconds and not gate:
        raise UsageError("--burn-in runs after the gate: drop --no-gate")
    return seconds


# --- bring-up --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BringupJob:
    """`cluster-tool bringup`'s options; `reach` is how the cluster is reached (command line,
    else the cluster's context)."""

    spec: Path
    reach: Reach
    limit: str | None = None
    phase: str | None = None
    check: bool = False
    diff: bool = False
    retry_failed: bool = False
    gate: bool = True
    admit_unproven: bool = False
    dcgm: bool = True
    runs_dir: Path | None = None
    burn_in: str | None = None  # --burn-in DURATION (or `default`): the soak after the gate
    preflight: bool = True  # the secrets and every host's SSH, in seconds, before anything


def run_bringup(cluster: Cluster, job: BringupJob, *, progress: Progress = _quiet) -> RunOutcome:
    """Render, converge (site.yml), validate, gate, admit what is proven; the run's record."""
    from cluster_tool.bounds import expand_hostlist, fold_hostlist
    from cluster_tool.workflows.bringup import BringupDeps, BringupOptions, PhaseProgress
    from cluster_tool.workflows.bringup import run_bringup as bring_up
    from cluster_tool.workflows.burnin import BurnInLive
    from cluster_tool.workflows.live import run_summary

    runs = job.runs_dir or default_runs_dir()
    limit = job.limit
    if limit and job.retry_failed:
        raise UsageError("--nodes and --retry-failed exclude each other")
    if job.diff and not job.check:
        raise UsageError("--diff goes with --check")
    if limit:
        expand_hostlist(limit, "--nodes")  # any host of the inventory, not only GPU nodes
    burn_in_s = _burn_in(job.burn_in, cluster, "bringup", job.gate)
    if job.retry_failed:
        limit = fold_hostlist(last_failed(runs, job.spec), "--retry-failed: the last run's nodes")
    if job.preflight:
        _preflight(cluster, _limited(cluster, limit), job.reach, progress, job.spec)
    inputs = {
        "spec": str(job.spec.resolve()),
        "limit": limit,
        "phase": job.phase,
        "check": job.check,
        "diff": job.diff,
        "retry_failed": job.retry_failed,
        "gate": job.gate,
        "admit_unproven": job.admit_unproven,
        "burn_in_s": burn_in_s,
    }
    record = RunRecord.create(runs, "bringup", inputs, run_secrets(cluster))
    progress(f"run record: {record.path}")
    inv = _inventory(cluster, job.reach.inventory, record, job.check)
    slurm = connect(job.reach.slurm_via, job.reach.ssh_config)
    live = BurnInLive(
        cluster,
        inv,
        record,
        slurm,
        job.reach.ssh_config,
        gate_workdir=job.reach.gate_workdir,
        dcgm=job.dcgm,
        burn_in_s=burn_in_s,
        # The validation's fabric read is the snapshot the read after the gate is judged by.
        judge_deltas=True,
    )
    deps = BringupDeps(
        converge=live.converge,
        validate=live.validate,
        gate=live.gate,
        slurm=slurm,
        counters=live.counters,
    )
    options = BringupOptions(
        limit=limit,
        phase=job.phase,
        check=job.check,
        diff=job.diff,
        gate=job.gate,
        admit_unproven=job.admit_unproven,
    )
    gpu = [n.name for n in cluster.gpu_nodes()]
    result = bring_up(gpu, deps, options, on_event=PhaseProgress(progress))
    summary = run_summary(
        command="bringup",
        record=record,
        inputs=inputs,
        phases=result.phases,
        findings=result.findings,
        verdicts=result.nodes,
        run=result.run,
        cluster=cluster,
        health_nodes=result.validated,
        fabric_checked=result.fabric_checked,
        busbw=result.busbw,
        gate_nodes=result.gated,
        skipped=live.skipped,
        extra_checks={n: ["ansible.converge"] for n in result.nodes},
        admitted_unproven=result.admitted_unproven,
    )
    if job.check:  # a dry run measured nothing of the nodes
        return _finish(record, summary, result.findings)
    return _finish_measured(cluster, record, summary, result.findings)


# --- re-image --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReimageJob:
    """`cluster-tool reimage`'s options. A resumed run (`resume`) keeps the node list, batches,
    limits and proof rules it started with."""

    spec: Path
    reach: Reach
    nodes: str | None = None
    batch: int = 1
    per_su: int = 1
    max_fail: int = 0
    resume: str | None = None
    force: bool = False
    drain_timeout_s: float = 3600.0
    ssh_timeout_s: float = 1800.0
    insecure_bmc: bool = False
    ca_bundle: Path | None = None
    bmc_scheme: str = "https"
    vault_file: Path | None = None
    vault_password_file: Path | None = None
    gate: bool = True
    admit_unproven: bool = False
    dcgm: bool = True
    runs_dir: Path | None = None
    burn_in: str | None = None
    # The operator's word: lift the drains the nodes had when the run began, once proven.
    admit: bool = False
    preflight: bool = True  # Slurm and the nodes' BMCs answering, before the first drain


def _bmc_access(
    cluster: Cluster, job: ReimageJob, progress: Progress
) -> tuple[TlsPolicy, Credentials]:
    """How the BMCs are reached and with what credentials (UsageError naming what is missing)."""
    from cluster_tool.bmc import TlsPolicy, bmc_credentials, load_vault

    # The context's standing BMC transport (the lab's emulators: plain http), unless given here.
    insecure = job.insecure_bmc or job.reach.bmc_insecure
    scheme = job.bmc_scheme
    if scheme == "https" and job.reach.bmc_scheme:
        scheme = job.reach.bmc_scheme
    tls = TlsPolicy(
        insecure=insecure, ca_bundle=str(job.ca_bundle) if job.ca_bundle else None, scheme=scheme
    )
    if cluster.bmc.verify_tls is False and not insecure:
        progress("the spec says verify_tls: false; TLS is still verified without --insecure-bmc")
    vault = None
    if job.vault_file is not None:
        if job.vault_password_file is None:
            raise UsageError("--vault-file needs --vault-password-file")
        vault = load_vault(job.vault_file, job.vault_password_file)
    return tls, bmc_credentials(cluster.bmc.credentials, vault=vault)


@dataclass
class ReimagePlan:
    """What `reimage --check` says a run would do, having changed nothing: its batches, the
    known-good partners of the pair rung, each node's BMC actions and what its drain would
    wait for."""

    batches: list[list[str]]
    partners: list[str]
    bmc: dict[str, str]  # node -> the BMC's URL
    jobs: dict[str, list[str]]  # node -> the jobs its drain would wait for
    drained: dict[str, str]  # node -> the drain it has now (kept, or lifted only with --admit)
    options: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "check": True,
            "batches": self.batches,
            "partners": self.partners,
            "bmc": self.bmc,
            "jobs": self.jobs,
            "drained": self.drained,
            "options": self.options,
        }

    def lines(self) -> list[str]:
        """The plan as an operator reads it, batch by batch."""
        drain_wait = f"{self.options['drain_timeout_s']:g} s"
        then = "cancel them (--force)" if self.options["force"] else "skip the node, left as it was"
        out = []
        for i, batch in enumerate(self.batches, 1):
            out.append(f"batch {i}: {NodeSet.fromlist(batch)}")
            for node in batch:
                jobs = self.jobs.get(node) or []
                waits = f"wait for jobs {', '.join(jobs)} (up to {drain_wait}, then {then})"
                out.append(
                    f"  {node}: drain{'; ' + waits if jobs else ''}; BMC {self.bmc.get(node, '?')}:"
                    " one-time PXE boot, power off, power on; SSH back; converge; single-node "
                    "nccl-tests" + ("; pair with a partner" if self.options["gate"] else "")
                )
                if node in self.drained:
                    out.append(f"    drained now: {self.drained[node]!r}")
        partners = str(NodeSet.fromlist(self.partners)) if self.partners else "none"
        out.append(f"partners (idle, in service, no job): {partners}")
        if not self.partners and self.options["gate"]:
            out.append("  no partner: every node would stay drained as gate.unproven")
        return out


def _reimage_preflight(
    cluster: Cluster,
    job: ReimageJob,
    tls: TlsPolicy,
    batches: list[list[str]],
    progress: Progress,
) -> None:
    """Before the first drain: Slurm answers the way the run asks it, and every BMC of the nodes
    takes a connection; PreflightFailed lists every problem. The nodes' SSH is not asked: a
    node is often re-imaged because it is down."""
    from cluster_tool.workflows import preflight

    gpu = {n.name: n for n in cluster.gpu_nodes()}
    wanted = [n for b in batches for n in b]
    bmcs = {n: tls.url(gpu[n].bmc_address or "") for n in wanted if gpu[n].bmc_address}
    result = preflight.run_preflight(
        cluster,
        [],
        None,
        slurm=connect(job.reach.slurm_via, job.reach.ssh_config),
        bmcs=bmcs,
        secrets=False,
    )
    progress(f"preflight: {', '.join(f'{k} {v}' for k, v in result.checked.items())}")
    if result.problems:
        raise preflight.PreflightFailed(result)


def plan_reimage(cluster: Cluster, job: ReimageJob, *, progress: Progress = _quiet) -> ReimagePlan:
    """`reimage --check`: the batches, partners and BMC actions a run would take, from the
    spec and what Slurm says now (read only). No run record, no drain, no BMC request."""
    from cluster_tool.workflows.common import known_good_partners

    if job.resume is not None:
        raise UsageError("--check plans a new re-image; it cannot --resume one")
    tls, _ = _bmc_access(cluster, job, progress)  # the credentials are there, unused
    inputs, batches = _plan_batches(cluster, job, tls)
    gpu = {n.name: n for n in cluster.gpu_nodes()}
    every = [n for b in batches for n in b]
    slurm = connect(job.reach.slurm_via, job.reach.ssh_config)
    states = {s.name: s for s in slurm.node_states(every)}
    running = {n: jobs for n, jobs in slurm.jobs_on(every).items() if jobs}
    return ReimagePlan(
        batches=batches,
        partners=known_good_partners(slurm, [n for n in gpu if n not in set(every)]),
        bmc={n: tls.url(gpu[n].bmc_address or "") for n in every if gpu[n].bmc_address},
        jobs=running,
        drained={n: st.reason for n, st in states.items() if st.drained},
        options={k: inputs[k] for k in ("batch", "per_su", "max_fail", "force", "gate")}
        | {"drain_timeout_s": job.drain_timeout_s},
    )


def run_reimage(cluster: Cluster, job: ReimageJob, *, progress: Progress = _quiet) -> RunOutcome:
    """Rolling re-image: drain → PXE + power cycle → SSH → converge → node ladder → resume, per
    batch, journaled so that `resume` continues where a killed run stopped."""
    from cluster_tool.bmc import SushyBmc
    from cluster_tool.remote.known_hosts import KnownHosts
    from cluster_tool.verdicts import GATE_SINGLE, judge_nodes, judge_run
    from cluster_tool.workflows.burnin import BurnInLive
    from cluster_tool.workflows.common import (
        Phase,
        node_verdicts,
        reimaged_node_answers,
        wait_for_ssh,
    )
    from cluster_tool.workflows.live import run_summary
    from cluster_tool.workflows.reimage import STEP_CHECKS, ReimageDeps, ReimageOptions
    from cluster_tool.workflows.reimage import run_reimage as reimage_batches

    tls, credentials = _bmc_access(cluster, job, progress)
    # A new run's batches are planned once, from the operator's input (nodes, batches,
    # burn-in): a bad one is exit 2 before anything is asked of Slurm or a BMC.
    planned = _plan_batches(cluster, job, tls) if job.resume is None else None
    if job.preflight and planned is not None:
        _reimage_preflight(cluster, job, tls, planned[1], progress)
    secrets = run_secrets(cluster)
    secrets.add(credentials.password)

    gpu = {n.name: n for n in cluster.gpu_nodes()}
    record, inputs, batches = _reimage_record(cluster, job, secrets, planned)
    progress(f"run record: {record.path}  (resume with --resume {record.run_id})")
    inv = _inventory(cluster, job.reach.inventory, record, False)
    slurm = connect(job.reach.slurm_via, job.reach.ssh_config)
    # A resumed run keeps the proof rules it started with, its burn-in too.
    live = BurnInLive(
        cluster,
        inv,
        record,
        slurm,
        job.reach.ssh_config,
        gate_workdir=job.reach.gate_workdir,
        gate_on=bool(inputs.get("gate", job.gate)),
        admit_unproven=bool(inputs.get("admit_unproven", job.admit_unproven)),
        dcgm=job.dcgm,
        burn_in_s=float(inputs.get("burn_in_s") or 0.0),
    )
    addresses = {n: node.bmc_address for n, node in gpu.items() if node.bmc_address}
    host_address = {h.name: h.address for h in cluster.hosts()}
    ssh_config = job.reach.ssh_config

    known = KnownHosts.for_cluster(cluster.name)

    def wait_ssh(node: str, timeout: float) -> bool:
        address = str(host_address.get(node) or node)
        return wait_for_ssh(address, timeout) and reimaged_node_answers(
            node, address, ssh_config, known
        )

    every = {n for b in batches for n in b}
    partners = _partners(slurm, [n for n in gpu if n not in every], record, progress)
    deps = ReimageDeps(
        slurm=slurm,
        bmc=SushyBmc(addresses, credentials, tls),
        wait_ssh=wait_ssh,
        converge=live.converge_nodes,
        ladder=live.node_ladder,
    )
    # A resumed run keeps the limits it started with.
    options = ReimageOptions(
        admit=bool(inputs.get("admit", job.admit)),
        batch=job.batch,
        per_su=job.per_su,
        max_fail=int(inputs.get("max_fail", job.max_fail)),
        force=bool(inputs.get("force", job.force)),
        drain_timeout_s=float(inputs.get("drain_timeout_s", job.drain_timeout_s)),
        ssh_timeout_s=job.ssh_timeout_s,
    )
    result = reimage_batches(
        record, batches, deps, options, partners=partners,
        on_step=lambda n, s, st: progress(f"{n}: {s} {st}"),
    )  # fmt: skip

    # Admitted by an earlier run of this record (read back from its journal): proven then.
    live.proof.earlier |= {
        n for n, o in result.nodes.items() if o.status == "passed" and n not in live.proof.passed
    }
    scope = [n for b in batches for n in b]
    judged = judge_nodes(scope, result.findings, live.proof)
    admitted = [n for n, o in result.nodes.items() if o.status == "passed"]
    waived = [n for n in admitted if judged[n].verdict != "pass"]
    verdicts = node_verdicts(judged, admitted=admitted)
    for n, o in result.nodes.items():
        verdicts[n]["step"] = o.step
        if o.reason and not verdicts[n]["reason"]:
            verdicts[n]["reason"] = o.reason
    phases = [
        Phase(f"batch {i}", _batch_status(b, result.nodes), detail=str(NodeSet.fromlist(b)))
        for i, b in enumerate(batches, 1)
    ]
    if result.stopped:
        phases.append(Phase("run", "failed", detail=result.stopped))
    run = judge_run(phases, result.findings, judged, admitted_unproven=waived)
    summary = run_summary(
        command="reimage",
        record=record,
        inputs={k: v for k, v in inputs.items() if k not in ("version", "command", "started")},
        phases=phases,
        findings=result.findings,
        verdicts=verdicts,
        run=run,
        cluster=cluster,
        health_nodes=[n for n in scope if n in live.proof.passed],
        fabric_checked=False,
        busbw=live.busbw,
        gate_nodes=[n for n in scope if GATE_SINGLE in live.proof.passed.get(n, set())],
        skipped=live.skipped,
        extra_checks={n: sorted(set(STEP_CHECKS.values())) for n in result.nodes},
        admitted_unproven=waived,
        stopped=result.stopped,
    )
    return _finish_measured(cluster, record, summary, result.findings)


def _reimage_record(
    cluster: Cluster,
    job: ReimageJob,
    secrets: Secrets,
    new_plan: tuple[dict[str, Any], list[list[str]]] | None,
) -> tuple[RunRecord, dict[str, Any], list[list[str]]]:
    """The run record with its inputs and batches: a new one with what `_plan_batches` planned
    from `job.nodes`, or the run `job.resume` names, checked to be a re-image of the same
    nodes."""
    from cluster_tool.bounds import expand_hostlist, host_name

    runs = job.runs_dir or default_runs_dir()
    if job.resume is not None:
        record = RunRecord.open(job.resume, runs, secrets)
        inputs = record.inputs()
        if inputs.get("command") != "reimage":
            raise UsageError(
                f"--resume {job.resume}: that run is a {inputs.get('command')}, not a reimage"
            )
        # A record is a file like any other: its node names go through the same bounds.
        where = f"--resume {job.resume}: inputs.json"
        planned = set(expand_hostlist(str(inputs.get("nodes") or ""), f"{where} nodes"))
        batches = inputs.get("batches")
        if not isinstance(batches, list) or not all(isinstance(b, list) for b in batches):
            raise UsageError(f"{where}: batches is not a list of node lists")
        names = [host_name(n, f"{where} batches") for b in batches for n in b]
        if not set(names) <= planned:
            raise UsageError(f"{where}: batches name nodes the run does not re-image")
        nodes = job.nodes
        if nodes and set(expand_hostlist(nodes, "--nodes")) != planned:
            raise UsageError(
                f"--resume {job.resume}: that run re-images {inputs['nodes']}, not {nodes}"
            )
        record.log("run", "resumed")
        return record, inputs, [list(b) for b in batches]
    assert new_plan is not None  # a new run is planned before its record
    inputs, batches = new_plan
    return RunRecord.create(runs, "reimage", inputs, secrets), inputs, batches


def _plan_batches(
    cluster: Cluster, job: ReimageJob, tls: TlsPolicy
) -> tuple[dict[str, Any], list[list[str]]]:
    """A new re-image's inputs and batches, from `job.nodes`."""
    from cluster_tool.nodes import select_gpu_nodes
    from cluster_tool.workflows.reimage import plan_batches

    if not job.nodes:
        raise UsageError("--nodes HOSTLIST is required (or --resume RUN)")
    burn_in_s = _burn_in(job.burn_in, cluster, "reimage", job.gate)
    gpu = {n.name: n for n in cluster.gpu_nodes()}
    protected = [cluster.slurm.controller, cluster.fabric.subnet_manager]
    # The controller and the subnet manager pass here so that plan_batches refuses them in
    # words that say why.
    wanted = select_gpu_nodes(cluster, job.nodes, "--nodes", also=protected)
    batches = plan_batches(
        [(n, (gpu[n].su or 0) if n in gpu else 0) for n in wanted],
        job.batch,
        job.per_su,
        protected,
    )
    inputs = {
        "spec": str(job.spec.resolve()),
        "nodes": str(NodeSet.fromlist(wanted)),
        "batch": job.batch,
        "per_su": job.per_su,
        "max_fail": job.max_fail,
        "force": job.force,
        "drain_timeout_s": job.drain_timeout_s,
        "gate": job.gate,
        "admit_unproven": job.admit_unproven,
        "admit": job.admit,
        "burn_in_s": burn_in_s,
        "batches": batches,
        # What the requests will use, scheme in the spec's address pattern included.
        "bmc_tls": tls.transport(
            gpu[n].bmc_address or "" for n in wanted if n in gpu and gpu[n].bmc_address
        ),
    }
    return inputs, batches


def _partners(
    slurm: SlurmAdmin, outside: list[str], record: RunRecord, progress: Progress
) -> list[str]:
    """Known-good partners for the ladder's pair rung: GPU nodes outside the run in service,
    idle and unused (`common.known_good_partners`)."""
    from cluster_tool.workflows.common import known_good_partners

    try:
        return known_good_partners(slurm, outside)
    except SlurmError as exc:
        # No known-good partner: the ladder can run the single rung only, which proves no
        # multi-node path, so each node ends `gate.unproven` and stays drained.
        record.log("partners", "failed", detail=f"no partner from Slurm: {exc}")
        progress(f"no known-good partner (Slurm: {exc}); nodes will stay drained unproven")
        return []


def _batch_status(batch: list[str], outcomes: Mapping[str, Any]) -> str:
    states = {outcomes[n].status for n in batch}
    if states == {"passed"}:
        return "passed"
    if "failed" in states:
        return "failed"
    return "skipped" if "pending" not in states else "not run"


# --- validate after maintenance --------------------------------------------------------------


@dataclass(frozen=True)
class ValidateAfterJob:
    """`cluster-tool validate-after`'s options (and `validate --after-maintenance`'s)."""

    spec: Path
    reach: Reach
    switch: str | None = None
    nodes: str | None = None
    admit: bool = False
    gate: bool = True
    admit_unproven: bool = False
    junit: Path | None = None
    save: Path | None = None
    replay: Path | None = None
    concurrency: int = 32
    transport: str = "openssh"
    dcgm: bool = True
    runs_dir: Path | None = None
    burn_in: str | None = None
    preflight: bool = True  # its nodes and Slurm answering, in seconds, before anything


class _Offline:
    """Slurm for a replayed run (--from): nothing is asked of a live cluster."""

    def _refuse(self) -> NoReturn:
        raise SlurmError("a replayed run (--from) asks nothing of Slurm")

    def submit(self, script: Path) -> str:
        self._refuse()

    def job_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        self._refuse()

    def cancel(self, job_id: str) -> None:
        self._refuse()

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        self._refuse()

    def resume(self, nodes: Iterable[str]) -> None:
        self._refuse()

    def node_states(self, nodes: Iterable[str] | None = None) -> list[NodeState]:
        self._refuse()

    def jobs_on(self, nodes: Iterable[str]) -> dict[str, list[str]]:
        self._refuse()

    def cancel_jobs_on(self, nodes: Iterable[str]) -> None:
        self._refuse()

    def reserve(self, name: str, nodes: Iterable[str]) -> None:
        self._refuse()

    def release(self, name: str) -> None:
        self._refuse()

    def running_jobs(self) -> list[RunningJob]:
        self._refuse()

    def requeue(self, job_id: str) -> None:
        self._refuse()

    def signal_batch(self, job_id: str, signal: str) -> None:
        self._refuse()

    def start_now(self, job_id: str) -> None:
        self._refuse()


def check_validate_after(job: ValidateAfterJob) -> None:
    """The option combinations validate after maintenance refuses, before anything is read."""
    if job.save is not None and job.replay is not None:
        raise UsageError("--save and --from exclude each other")
    if job.replay is not None and job.gate:
        raise UsageError("--from replays a capture with no SSH; the gate runs jobs through Slurm: "
                         "add --no-gate")  # fmt: skip
    if job.replay is not None and job.admit:
        raise UsageError("--from replays a capture; --admit changes Slurm: drop one of them")
    if job.admit_unproven and not job.admit:
        raise UsageError("--admit-unproven goes with --admit")


def run_validate_after(
    cluster: Cluster, job: ValidateAfterJob, *, progress: Progress = _quiet
) -> RunOutcome:
    """After maintenance: the whole fabric, then health and the gate on the switch's nodes (or
    the given ones); with `admit`, resume what is proven and drain what is not."""
    from cluster_tool.fileio import atomic_write
    from cluster_tool.remote.fanout import transport_named
    from cluster_tool.remote.known_hosts import KnownHosts
    from cluster_tool.workflows.burnin import BurnInLive
    from cluster_tool.workflows.live import run_summary
    from cluster_tool.workflows.validate import (
        AfterMaintenanceDeps,
        run_after_maintenance,
        select_after_maintenance,
    )

    check_validate_after(job)
    burn_in_s = _burn_in(job.burn_in, cluster, "validate", job.gate)
    chosen = transport_named(
        job.transport, job.reach.ssh_config, KnownHosts.for_cluster(cluster.name)
    )
    selected = select_after_maintenance(cluster, job.switch, job.nodes)
    if job.preflight and job.replay is None:
        # The same preflight as a bring-up's, before the run record: the maintained nodes and
        # the fabric's host answering (in seconds, one hostlist of those that do not, exit 3),
        # Slurm when the run will ask it. Their hardware is not held here: a node that differs
        # from its profile after maintenance is this run's own profile.mismatch finding, and
        # is held, not a reason to validate nothing.
        sm = cluster.fabric.subnet_manager
        hosts = [*selected, *([sm] if sm in {h.name for h in cluster.hosts()} else [])]
        _preflight(
            cluster,
            list(dict.fromkeys(hosts)),
            job.reach,
            progress,
            job.spec,
            secrets=False,
            hardware=False,
            slurm=connect(job.reach.slurm_via, job.reach.ssh_config)
            if job.gate or job.admit
            else None,
        )
    inputs = {
        "spec": str(job.spec.resolve()),
        "switch": job.switch,
        "nodes": str(NodeSet.fromlist(selected)),
        "admit": job.admit,
        "gate": job.gate,
        "admit_unproven": job.admit_unproven,
        "burn_in_s": burn_in_s,
        "replayed_from": str(job.replay) if job.replay is not None else None,
    }
    runs = job.runs_dir or default_runs_dir()
    record = RunRecord.create(runs, "validate-after", inputs, run_secrets(cluster))
    slurm: SlurmAdmin = (
        _Offline() if job.replay is not None else connect(job.reach.slurm_via, job.reach.ssh_config)
    )
    live = BurnInLive(
        cluster,
        Path("."),
        record,
        slurm,
        job.reach.ssh_config,
        transport=chosen,
        gate_workdir=job.reach.gate_workdir,
        dcgm=job.dcgm,
        replay=job.replay,
        save=job.save,
        concurrency=job.concurrency,
        # The maintained nodes may have been rebooted: their cables' LinkDowned is judged only
        # as what changed between the fabric read and the one after the gate.
        judge_deltas=True,
        rebooted=tuple(selected),
        burn_in_s=burn_in_s,
    )
    deps = AfterMaintenanceDeps(
        fabric=live.fabric, health=live.health, gate=live.gate, slurm=slurm, counters=live.counters
    )
    others = [n.name for n in cluster.gpu_nodes() if n.name not in set(selected)]
    result = run_after_maintenance(
        selected,
        deps,
        admit=job.admit,
        gate=job.gate,
        admit_unproven=job.admit_unproven,
        others=others,
    )
    summary = run_summary(
        command="validate-after",
        record=record,
        inputs=inputs,
        phases=result.phases,
        findings=result.findings,
        verdicts=result.nodes,
        run=result.run,
        cluster=cluster,
        health_nodes=selected,
        fabric_checked=result.fabric_checked,
        busbw=result.busbw,
        gate_nodes=result.gated,
        skipped=result.skipped,
        admitted_unproven=result.admitted_unproven,
    )
    outcome = _finish_measured(cluster, record, summary, result.findings)
    if job.junit is not None:
        # The operator's copy: the record's own junit.xml, from the same summary and findings.
        job.junit.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(job.junit, (record.path / "junit.xml").read_text(encoding="utf-8"))
    return outcome
