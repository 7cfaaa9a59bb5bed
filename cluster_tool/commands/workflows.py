"""`cluster-tool bringup`, `reimage`, `validate-after` and `report`: the three jobs end to end,
each writing a run record (runs/<timestamp>-<id>/) and each safe to interrupt and re-run."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cluster_tool import output
from cluster_tool.commands._context import reach_cluster
from cluster_tool.errors import UsageError

# The workflows (ansible-runner, sushy, the gate) are imported inside the commands: any other
# command, and --help, starts without them.
if TYPE_CHECKING:
    from cluster_tool.spec import Cluster
    from cluster_tool.workflows.runs import RunRecord, Secrets

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output (the summary) on stdout.")]
SpecArg = Annotated[Path, typer.Argument(help="The cluster spec (YAML).")]
RunsDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--runs-dir", help="Where run records go (default $CLUSTER_TOOL_RUNS_DIR or runs/)."
    ),
]
InventoryOpt = Annotated[
    Path | None,
    typer.Option("--inventory", help="A rendered inventory to use (default: render the spec)."),
]
SshConfigOpt = Annotated[
    Path | None, typer.Option("--ssh-config", help="OpenSSH config naming the hosts.")
]
SlurmViaOpt = Annotated[
    str | None,
    typer.Option(
        "--slurm-via",
        help="Run Slurm commands over SSH on this host (default $CLUSTER_TOOL_SLURM_VIA).",
    ),
]
AdmitUnprovenOpt = Annotated[
    bool,
    typer.Option(
        "--admit-unproven",
        help="Also admit a node whose only gap is the gate's proof (no gate, no proven "
        "partner); the run record and report say so.",
    ),
]
GateWorkdirOpt = Annotated[
    Path | None,
    typer.Option("--gate-workdir", help="Gate job scripts and outputs; shared with the nodes."),
]


def _secrets(cluster: "Cluster") -> "Secrets":
    """Every secret this run could meet (`cluster_secrets`); the munge key is looked for where
    the slurm role keeps it, ~/.cluster-tool/secrets/<slurm_cluster_name>/, or runs/secrets/."""
    from cluster_tool.ansible.runner import REPO_ROOT
    from cluster_tool.workflows.runs import cluster_secrets

    dirs = [Path.home() / ".cluster-tool" / "secrets", REPO_ROOT / "runs" / "secrets"]
    return cluster_secrets(cluster, secret_dirs=dirs)


def _slurm(slurm_via: str | None, ssh_config: Path | None) -> Any:
    from cluster_tool.slurm import connect

    return connect(slurm_via, ssh_config)


def _inventory(cluster: "Cluster", given: Path | None, record: "RunRecord", check: bool) -> Path:
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


def _print(summary: dict[str, Any], record: "RunRecord", json_out: bool) -> None:
    if json_out:
        output.emit_json({**summary, "run_dir": str(record.path)})
        return
    out = output.stdout
    for phase in summary.get("phases", []):
        detail = f" ({phase['detail']})" if phase.get("detail") else ""
        out.print(f"{phase['name']:10} {phase['status']}{detail}", markup=False)
    for node, v in summary.get("nodes", {}).items():
        if v.get("verdict") != "pass":
            out.print(f"{node}: {v.get('verdict')}: {v.get('reason') or ''}", markup=False)
    headline = summary.get("headline") or str(summary.get("verdict", "fail")).upper()
    out.print(f"{headline}  report: {record.path / 'report.html'}", markup=False)


# --- bringup -------------------------------------------------------------------------------


def _last_failed(runs_dir: Path, spec: Path) -> list[str]:
    """Hosts that did not pass in the last bringup of this spec: GPU nodes whose verdict is not
    pass, and any other host an error finding names (a head that failed to converge)."""
    from cluster_tool.workflows.runs import find_runs

    for record in reversed(find_runs(runs_dir, "bringup")):
        if record.inputs().get("spec") != str(spec.resolve()):
            continue
        path = record.path / "summary.json"
        if not path.is_file():
            continue
        summary = json.loads(path.read_text(encoding="utf-8"))
        failed = [n for n, v in summary.get("nodes", {}).items() if v.get("verdict") != "pass"]
        findings_path = record.path / "findings.json"
        if findings_path.is_file():
            findings = json.loads(findings_path.read_text(encoding="utf-8")).get("findings", [])
            failed += [
                str(f["node"])
                for f in findings
                if f.get("severity") == "error" and f.get("node") and f["node"] not in failed
            ]
        if not failed:
            raise UsageError(
                f"--retry-failed: nothing failed in the last bringup ({record.run_id})"
            )
        return list(dict.fromkeys(failed))
    raise UsageError(f"--retry-failed: no earlier bringup of {spec} under {runs_dir}")


def bringup(
    spec: SpecArg,
    limit: Annotated[
        str | None, typer.Option("--limit", help="Only these hosts (hostlist).")
    ] = None,
    phase: Annotated[
        str | None,
        typer.Option("--phase", help="Only this phase (os, driver, fabric, comms, slurm, tools)."),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Dry run: what would change.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show file diffs (with --check).")] = False,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Only the hosts that failed last time.")
    ] = False,
    gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Run the NCCL gate.")] = True,
    admit_unproven: AdmitUnprovenOpt = False,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    gate_workdir: GateWorkdirOpt = None,
    dcgm: Annotated[bool, typer.Option("--dcgm/--no-dcgm", help="Run `dcgmi diag -r 1`.")] = True,
    runs_dir: RunsDirOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Render, converge (site.yml), validate, gate, admit what is proven. Exit 0 every node
    proven and admitted, 1 otherwise, 3 a host unreachable."""
    from ClusterShell.NodeSet import NodeSet
    from rich.markup import escape

    from cluster_tool.bounds import bounded_hostlist
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.bringup import (
        BringupDeps,
        BringupOptions,
        PhaseProgress,
        run_bringup,
    )
    from cluster_tool.workflows.live import Live, run_summary
    from cluster_tool.workflows.runs import RunRecord, default_runs_dir

    cluster = load_spec(spec)
    via = reach_cluster(cluster, inventory, ssh_config, slurm_via, gate_workdir)
    inventory, ssh_config, slurm_via, gate_workdir = (
        via.inventory, via.ssh_config, via.slurm_via, via.gate_workdir
    )  # fmt: skip
    runs = runs_dir or default_runs_dir()
    if limit and retry_failed:
        raise UsageError("--limit and --retry-failed exclude each other")
    if diff and not check:
        raise UsageError("--diff goes with --check")
    if limit:
        bounded_hostlist(limit, "--limit")  # any host of the inventory, not only GPU nodes
    if retry_failed:
        limit = str(NodeSet.fromlist(_last_failed(runs, spec)))
    inputs = {
        "spec": str(spec.resolve()),
        "limit": limit,
        "phase": phase,
        "check": check,
        "diff": diff,
        "retry_failed": retry_failed,
        "gate": gate,
        "admit_unproven": admit_unproven,
    }
    record = RunRecord.create(runs, "bringup", inputs, _secrets(cluster))
    output.progress(f"run record: {record.path}")
    inv = _inventory(cluster, inventory, record, check)
    slurm = _slurm(slurm_via, ssh_config)
    live = Live(cluster, inv, record, slurm, ssh_config, gate_workdir=gate_workdir, dcgm=dcgm)
    deps = BringupDeps(converge=live.converge, validate=live.validate, gate=live.gate, slurm=slurm)
    gpu = [n.name for n in cluster.gpu_nodes()]
    result = run_bringup(
        gpu,
        deps,
        BringupOptions(
            limit=limit,
            phase=phase,
            check=check,
            diff=diff,
            gate=gate,
            admit_unproven=admit_unproven,
        ),
        # Task names and messages may hold [brackets]: shown as text, never as rich markup.
        on_event=PhaseProgress(lambda line: output.progress(escape(line))),
    )
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
        extra={"admitted_unproven": result.admitted_unproven},
    )
    record.finish(summary, result.findings)
    _print(summary, record, json_out)
    return result.exit_code


# --- reimage -------------------------------------------------------------------------------


def reimage(
    spec: SpecArg,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="The GPU nodes to re-image (hostlist).")
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Nodes per batch.")] = 1,
    per_su: Annotated[
        int, typer.Option("--per-su", min=1, help="At most this many of one SU at once.")
    ] = 1,
    max_fail: Annotated[
        int, typer.Option("--max-fail", min=0, help="Stop once more nodes failed.")
    ] = 0,
    resume: Annotated[
        str | None,
        typer.Option("--resume", help="Continue this run (id or folder) where it stopped."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Cancel jobs still running after --drain-timeout.")
    ] = False,
    drain_timeout: Annotated[
        float, typer.Option("--drain-timeout", min=0, help="Seconds to wait for running jobs.")
    ] = 3600.0,
    ssh_timeout: Annotated[
        float, typer.Option("--ssh-timeout", min=1, help="Seconds to wait for a node to come back.")
    ] = 1800.0,
    insecure_bmc: Annotated[
        bool,
        typer.Option("--insecure-bmc", help="Do not verify BMC TLS certificates (or allow http)."),
    ] = False,
    ca_bundle: Annotated[
        Path | None, typer.Option("--ca-bundle", help="CA bundle that signs the BMC certificates.")
    ] = None,
    bmc_scheme: Annotated[
        str, typer.Option("--bmc-scheme", help="https (default) or http (needs --insecure-bmc).")
    ] = "https",
    vault_file: Annotated[
        Path | None, typer.Option("--vault-file", help="Ansible vault holding the BMC credentials.")
    ] = None,
    vault_password_file: Annotated[
        Path | None, typer.Option("--vault-password-file", help="The vault's password file.")
    ] = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    gate_workdir: GateWorkdirOpt = None,
    gate: Annotated[
        bool, typer.Option("--gate/--no-gate", help="Single + pair gate in the node ladder.")
    ] = True,
    admit_unproven: AdmitUnprovenOpt = False,
    dcgm: Annotated[bool, typer.Option("--dcgm/--no-dcgm", help="Run `dcgmi diag -r 1`.")] = True,
    runs_dir: RunsDirOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Rolling re-image: drain → PXE + power cycle → SSH → converge → node ladder → resume."""
    from ClusterShell.NodeSet import NodeSet

    from cluster_tool.bmc import SushyBmc, TlsPolicy, bmc_credentials, load_vault
    from cluster_tool.bounds import bounded_hostlist
    from cluster_tool.nodes import select_gpu_nodes
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.common import ssh_true, wait_for_ssh
    from cluster_tool.workflows.live import Live, run_summary
    from cluster_tool.workflows.reimage import (
        STEP_CHECKS,
        ReimageDeps,
        ReimageOptions,
        plan_batches,
        run_reimage,
    )
    from cluster_tool.workflows.runs import RunRecord, default_runs_dir

    cluster = load_spec(spec)
    via = reach_cluster(cluster, inventory, ssh_config, slurm_via, gate_workdir)
    inventory, ssh_config, slurm_via, gate_workdir = (
        via.inventory, via.ssh_config, via.slurm_via, via.gate_workdir
    )  # fmt: skip
    # The context's standing BMC transport (the lab's emulators: plain http), unless given here.
    insecure_bmc = insecure_bmc or via.bmc_insecure
    if bmc_scheme == "https" and via.bmc_scheme:
        bmc_scheme = via.bmc_scheme
    runs = runs_dir or default_runs_dir()
    tls = TlsPolicy(
        insecure=insecure_bmc, ca_bundle=str(ca_bundle) if ca_bundle else None, scheme=bmc_scheme
    )
    if cluster.bmc.verify_tls is False and not insecure_bmc:
        output.progress(
            "the spec says verify_tls: false; TLS is still verified without --insecure-bmc"
        )
    vault = None
    if vault_file is not None:
        if vault_password_file is None:
            raise UsageError("--vault-file needs --vault-password-file")
        vault = load_vault(vault_file, vault_password_file)
    credentials = bmc_credentials(cluster.bmc.credentials, vault=vault)
    secrets = _secrets(cluster)
    secrets.add(credentials.password)

    gpu = {n.name: n for n in cluster.gpu_nodes()}
    protected = [cluster.slurm.controller, cluster.fabric.subnet_manager]
    if resume is not None:
        record = RunRecord.open(resume, runs, secrets)
        inputs = record.inputs()
        if inputs.get("command") != "reimage":
            raise UsageError(
                f"--resume {resume}: that run is a {inputs.get('command')}, not a reimage"
            )
        if nodes and set(bounded_hostlist(nodes, "--nodes")) != set(NodeSet(inputs["nodes"])):
            raise UsageError(
                f"--resume {resume}: that run re-images {inputs['nodes']}, not {nodes}"
            )
        batches = [list(b) for b in inputs["batches"]]
        record.log("run", "resumed")
    else:
        if not nodes:
            raise UsageError("--nodes HOSTLIST is required (or --resume RUN)")
        # The controller and the subnet manager pass here so that plan_batches refuses them
        # in words that say why.
        wanted = select_gpu_nodes(cluster, nodes, "--nodes", also=protected)
        batches = plan_batches(
            [(n, (gpu[n].su or 0) if n in gpu else 0) for n in wanted], batch, per_su, protected
        )
        inputs = {
            "spec": str(spec.resolve()),
            "nodes": str(NodeSet.fromlist(wanted)),
            "batch": batch,
            "per_su": per_su,
            "max_fail": max_fail,
            "force": force,
            "drain_timeout_s": drain_timeout,
            "gate": gate,
            "admit_unproven": admit_unproven,
            "batches": batches,
            # What the requests will use, scheme in the spec's address pattern included.
            "bmc_tls": tls.transport(
                gpu[n].bmc_address or "" for n in wanted if n in gpu and gpu[n].bmc_address
            ),
        }
        record = RunRecord.create(runs, "reimage", inputs, secrets)
    output.progress(f"run record: {record.path}  (resume with --resume {record.run_id})")
    inv = _inventory(cluster, inventory, record, False)
    slurm = _slurm(slurm_via, ssh_config)
    # A resumed run keeps the proof rules it started with.
    live = Live(
        cluster,
        inv,
        record,
        slurm,
        ssh_config,
        gate_workdir=gate_workdir,
        gate_on=bool(inputs.get("gate", gate)),
        admit_unproven=bool(inputs.get("admit_unproven", admit_unproven)),
        dcgm=dcgm,
    )
    addresses = {n: node.bmc_address for n, node in gpu.items() if node.bmc_address}
    bmc = SushyBmc(addresses, credentials, tls)
    host_address = {h.name: h.address for h in cluster.hosts()}

    def wait_ssh(node: str, timeout: float) -> bool:
        address = str(host_address.get(node) or node)
        return wait_for_ssh(address, timeout) and ssh_true(node, ssh_config)

    from cluster_tool.slurm import SlurmError

    every = {n for b in batches for n in b}
    try:
        states = slurm.node_states([n for n in gpu if n not in every])
        partners = [s.name for s in states if s.usable]
    except SlurmError as exc:
        # No known-good partner: the ladder can run the single rung only, which proves no
        # multi-node path, so each node ends `gate.unproven` and stays drained.
        record.log("partners", "failed", detail=f"no partner from Slurm: {exc}")
        output.progress(f"no known-good partner (Slurm: {exc}); nodes will stay drained unproven")
        partners = []
    deps = ReimageDeps(
        slurm=slurm,
        bmc=bmc,
        wait_ssh=wait_ssh,
        converge=live.converge_nodes,
        ladder=live.node_ladder,
    )
    # A resumed run keeps the limits it started with.
    options = ReimageOptions(
        batch=batch,
        per_su=per_su,
        max_fail=int(inputs.get("max_fail", max_fail)),
        force=bool(inputs.get("force", force)),
        drain_timeout_s=float(inputs.get("drain_timeout_s", drain_timeout)),
        ssh_timeout_s=ssh_timeout,
    )
    result = run_reimage(
        record, batches, deps, options, partners=partners,
        on_step=lambda n, s, st: output.progress(f"{n}: {s} {st}"),
    )  # fmt: skip
    from cluster_tool.verdicts import GATE_SINGLE, judge_nodes, judge_run
    from cluster_tool.workflows.bringup import Phase
    from cluster_tool.workflows.common import node_verdicts

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
        extra={"stopped": result.stopped, "admitted_unproven": waived},
    )
    record.finish(summary, result.findings)
    _print(summary, record, json_out)
    return run.exit_code


def _batch_status(batch: list[str], outcomes: dict[str, Any]) -> str:
    states = {outcomes[n].status for n in batch}
    if states == {"passed"}:
        return "passed"
    if "failed" in states:
        return "failed"
    return "skipped" if "pending" not in states else "not run"


# --- validate after maintenance -------------------------------------------------------------


def validate_after(
    spec: SpecArg,
    switch: Annotated[
        str | None, typer.Option("--switch", help="The leaf or spine that was touched.")
    ] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Or these GPU nodes (hostlist).")
    ] = None,
    admit: Annotated[
        bool, typer.Option("--admit", help="Resume what is proven; drain what is not.")
    ] = False,
    gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Run the NCCL gate.")] = True,
    admit_unproven: AdmitUnprovenOpt = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the run's JUnit XML here.")
    ] = None,
    save: Annotated[
        Path | None, typer.Option("--save", help="Save every raw output under this folder.")
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option("--from", help="Replay a saved capture; no SSH (needs --no-gate)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Hosts probed at once.", min=1)
    ] = 32,
    transport: Annotated[
        str, typer.Option("--transport", help="openssh (default) or paramiko.")
    ] = "openssh",
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    gate_workdir: GateWorkdirOpt = None,
    dcgm: Annotated[bool, typer.Option("--dcgm/--no-dcgm", help="Run `dcgmi diag -r 1`.")] = True,
    runs_dir: RunsDirOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """After maintenance: the whole fabric, then health + gate on the switch's nodes."""
    return run_validate_after(
        spec, switch=switch, nodes=nodes, admit=admit, gate=gate, admit_unproven=admit_unproven,
        junit=junit, save=save, replay=replay, concurrency=concurrency, transport=transport,
        ssh_config=ssh_config, slurm_via=slurm_via, gate_workdir=gate_workdir, dcgm=dcgm,
        runs_dir=runs_dir, json_out=json_out,
    )  # fmt: skip


class _Offline:
    """Slurm for a replayed run: nothing is asked of a live cluster."""

    def __getattr__(self, name: str) -> Any:
        from cluster_tool.slurm import SlurmError

        def refuse(*_args: object, **_kwargs: object) -> Any:
            raise SlurmError("a replayed run (--from) asks nothing of Slurm")

        return refuse


def run_validate_after(
    spec: Path,
    *,
    switch: str | None,
    nodes: str | None,
    admit: bool = False,
    gate: bool = True,
    admit_unproven: bool = False,
    junit: Path | None = None,
    save: Path | None = None,
    replay: Path | None = None,
    concurrency: int = 32,
    transport: str = "openssh",
    ssh_config: Path | None = None,
    slurm_via: str | None = None,
    gate_workdir: Path | None = None,
    dcgm: bool = True,
    runs_dir: Path | None = None,
    json_out: bool = False,
) -> int:
    """The command's body, callable from `validate --after-maintenance` as well."""
    from ClusterShell.NodeSet import NodeSet

    from cluster_tool.remote.fanout import transport_named
    from cluster_tool.report import junit_xml, load_run
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.live import Live, run_summary
    from cluster_tool.workflows.runs import RunRecord, default_runs_dir
    from cluster_tool.workflows.validate import (
        AfterMaintenanceDeps,
        run_after_maintenance,
        select_after_maintenance,
    )

    if save is not None and replay is not None:
        raise UsageError("--save and --from exclude each other")
    if replay is not None and gate:
        raise UsageError("--from replays a capture with no SSH; the gate runs jobs through Slurm: "
                         "add --no-gate")  # fmt: skip
    if replay is not None and admit:
        raise UsageError("--from replays a capture; --admit changes Slurm: drop one of them")
    if admit_unproven and not admit:
        raise UsageError("--admit-unproven goes with --admit")
    cluster = load_spec(spec)
    if replay is None:
        via = reach_cluster(cluster, None, ssh_config, slurm_via, gate_workdir)
        ssh_config, slurm_via, gate_workdir = via.ssh_config, via.slurm_via, via.gate_workdir
    chosen = transport_named(transport, ssh_config)
    selected = select_after_maintenance(cluster, switch, nodes)
    inputs = {
        "spec": str(spec.resolve()),
        "switch": switch,
        "nodes": str(NodeSet.fromlist(selected)),
        "admit": admit,
        "gate": gate,
        "admit_unproven": admit_unproven,
        "replayed_from": str(replay) if replay is not None else None,
    }
    record = RunRecord.create(
        runs_dir or default_runs_dir(), "validate-after", inputs, _secrets(cluster)
    )
    slurm = _Offline() if replay is not None else _slurm(slurm_via, ssh_config)
    live = Live(
        cluster,
        Path("."),
        record,
        slurm,
        ssh_config,
        transport=chosen,
        gate_workdir=gate_workdir,
        dcgm=dcgm,
        replay=replay,
        save=save,
        concurrency=concurrency,
    )
    deps = AfterMaintenanceDeps(fabric=live.fabric, health=live.health, gate=live.gate, slurm=slurm)
    others = [n.name for n in cluster.gpu_nodes() if n.name not in set(selected)]
    result = run_after_maintenance(
        selected, deps, admit=admit, gate=gate, admit_unproven=admit_unproven, others=others
    )
    summary = run_summary(
        command="validate-after",
        record=record,
        inputs=inputs,
        phases=result.phases,
        findings=result.findings,
        verdicts=result.verdicts,
        run=result.run,
        cluster=cluster,
        health_nodes=selected,
        fabric_checked=result.fabric_checked,
        busbw=result.busbw,
        gate_nodes=result.gated,
        skipped=live.skipped,
        extra={"admitted_unproven": result.admitted_unproven},
    )
    record.finish(summary, result.findings)
    if junit is not None:
        saved, findings = load_run(record.path)
        from cluster_tool.fileio import atomic_write

        junit.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(junit, junit_xml(saved, findings, name="cluster-tool validate-after"))
    _print(summary, record, json_out)
    return int(summary["exit_code"])


# --- report --------------------------------------------------------------------------------


def report(
    run: Annotated[str, typer.Argument(help="The run: its folder, or its id under --runs-dir.")],
    runs_dir: RunsDirOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Re-render junit.xml and report.html of a run from its summary.json and findings.json."""
    from cluster_tool.report import load_run, write_report
    from cluster_tool.workflows.runs import RunRecord, default_runs_dir

    record = RunRecord.open(run, runs_dir or default_runs_dir())
    written = write_report(record.path)
    summary, _ = load_run(record.path)
    if json_out:
        output.emit_json(
            {
                "run_dir": str(record.path),
                "written": [str(p) for p in written],
                "verdict": summary.get("verdict"),
            }
        )
    else:
        output.stdout.print(
            f"{str(summary.get('verdict', '?')).upper()}  {record.path / 'report.html'}",
            markup=False,
        )
    return 0 if summary.get("verdict") == "pass" else 1


def register(app: typer.Typer) -> None:
    app.command("bringup")(bringup)
    app.command("reimage")(reimage)
    app.command("validate-after")(validate_after)
    app.command("report")(report)
