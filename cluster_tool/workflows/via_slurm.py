"""`validate --via slurm`: the node checks on many nodes as one Slurm job step, `srun` one task
per node running `cluster-tool node-check --json`, instead of one SSH session per node.

Each task's stdout lands in a file Slurm names after the node (`%N`, expanded by Slurm on the
node that runs the task) in a folder the controller and the nodes share, so a node's record is
attributed by Slurm, never by what the node prints: a record whose findings name another node is
refused, and a node without a readable record is a finding for that node. The node checks are
judged against node files the controller writes from its spec into the same folder, so both
paths hold a node to the same expectations. Nodes Slurm would not start the step on (drained,
down, busy, unknown to it) are left to the SSH fan-out, with why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cluster_tool.checks.fleet_versions import node_versions
from cluster_tool.checks.node import FleetExpectations
from cluster_tool.checks.versions import Hca, NodeVersions
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.fileio import atomic_write, fresh_dir, load_json, read_input_bytes
from cluster_tool.findings import Finding
from cluster_tool.probes import ProbeOutput
from cluster_tool.probes.node import NvidiaSmiQ
from cluster_tool.probes.versions import PROBE_NAME as VERSIONS_PROBE
from cluster_tool.probes.versions import Versions
from cluster_tool.remote.fanout import LocalTransport, Target, Transport, collect
from cluster_tool.slurm import NodeState, SlurmError, SlurmSteps, srun_argv
from cluster_tool.spec.models import Cluster

__all__ = [
    "NODE_COMMAND",
    "StepOutcome",
    "node_versions_record",
    "run_node_checks_via_slurm",
    "step_plan",
    "versions_record",
]

# What each task runs; the role that installs cluster-tool on the GPU nodes puts it on PATH.
NODE_COMMAND = "cluster-tool"
# A node-check record is a report of one node's findings: a few kB; far more is not one.
_MAX_RECORD_BYTES = 4 * 1024 * 1024


@dataclass
class StepOutcome:
    """What the step gave: the findings of each node that answered with a readable record, why
    each other stepped node gave none, and the nodes left to SSH with why."""

    findings: dict[str, list[Finding]] = field(default_factory=dict)
    no_record: dict[str, str] = field(default_factory=dict)
    # What each node runs, judged on the controller across the fleet as over SSH; why not read.
    versions: dict[str, NodeVersions] = field(default_factory=dict)
    unread_versions: dict[str, str] = field(default_factory=dict)
    to_ssh: dict[str, str] = field(default_factory=dict)
    folder: Path | None = None
    srun: str = ""  # srun's exit status and last word, for the summary
    elapsed_s: float = 0.0


def step_plan(
    cluster: Cluster, nodes: Sequence[str], states: Sequence[NodeState]
) -> tuple[list[str], dict[str, str], int | None]:
    """The nodes the step runs on (idle in Slurm, not drained, one GPU count), those left to SSH
    with why, and the GPUs per node the step asks for. A busy node would hold an exclusive step
    back; a drained or down one would never start it."""
    known = {s.name: s for s in states}
    stepped: list[str] = []
    to_ssh: dict[str, str] = {}
    gpus: int | None = None
    for name in nodes:
        state = known.get(name)
        if state is None:
            to_ssh[name] = "not a Slurm node"
            continue
        if state.drained:
            to_ssh[name] = f"drained in Slurm ({state.reason or 'no reason'})"
            continue
        if state.state != "IDLE" or not state.usable:
            flags = "+".join(sorted(state.flags))
            to_ssh[name] = f"{state.state}{'+' + flags if flags else ''} in Slurm, not idle"
            continue
        profile = cluster.host(name).profile
        count = profile.gpu_count if profile is not None else None
        if gpus is None:
            gpus = count
        if count != gpus:
            to_ssh[name] = f"{count} GPUs, the step asks for {gpus} per node"
            continue
        stepped.append(name)
    return stepped, to_ssh, gpus


def run_node_checks_via_slurm(
    cluster: Cluster,
    nodes: Sequence[str],
    slurm: SlurmSteps,
    shared: Path,
    *,
    dcgm: bool = True,
    timeout_s: int = 600,
    node_command: str = NODE_COMMAND,
) -> StepOutcome:
    """Run `node-check --json` on `nodes` as one job step and read each node's record from
    `shared` (a folder the nodes see at the same path). Nodes the step cannot run on, or every
    node when Slurm refuses the step before any task started, are left to SSH."""
    started = time.monotonic()
    try:
        states = slurm.node_states(None)
    except SlurmError as exc:
        return StepOutcome(to_ssh=dict.fromkeys(nodes, f"Slurm did not answer: {exc}"))
    stepped, to_ssh, gpus = step_plan(cluster, nodes, states)
    outcome = StepOutcome(to_ssh=to_ssh)
    if not stepped:
        return outcome
    folder = _run_folder(shared)
    outcome.folder = folder
    expectations = FleetExpectations(cluster)
    for name in stepped:
        expect = expectations(name)
        text = json.dumps(expect.to_node_file(), indent=2, sort_keys=True) + "\n"
        atomic_write(folder / "nodes" / f"{name}.json", text, mode=0o644)  # read by the nodes
    # $SLURMD_NODENAME is Slurm's name for the node the task runs on: each task reads the node
    # file written for that node.
    script = f'exec {node_command} node-check --json --node-file "$0/$SLURMD_NODENAME.json" "$@"'
    command = ["sh", "-c", script, str(folder / "nodes"), "--versions"]
    command += ["--dcgm"] if dcgm else []
    argv = srun_argv(
        stepped,
        command,
        output=str(folder / "out" / "%N.json"),
        error=str(folder / "out" / "%N.err"),
        time_limit_s=timeout_s,
        gpus_per_node=gpus,
        job_name="cluster-tool-validate",
    )
    try:
        run = slurm.srun_step(argv, timeout_s + 120)
        outcome.srun = f"exit {run.rc}" + (f": {run.said}" if run.said else "")
    except SlurmError as exc:
        outcome.srun = str(exc)
    outcome.elapsed_s = round(time.monotonic() - started, 2)
    ran = [n for n in stepped if (folder / "out" / f"{n}.json").exists()]
    if not ran:
        # No task started (the nodes were taken meanwhile, a partition they are not in, srun
        # missing): the SSH fan-out still reads them.
        outcome.to_ssh.update(
            dict.fromkeys(stepped, f"the Slurm step did not start: {outcome.srun}")
        )
        return outcome
    for name in stepped:
        record = read_record(folder / "out", name)
        if isinstance(record, str):
            outcome.no_record[name] = record
            continue
        outcome.findings[name], versions = record
        if isinstance(versions, NodeVersions):
            outcome.versions[name] = versions
        elif versions is not None:
            outcome.unread_versions[name] = versions
    return outcome


def _run_folder(shared: Path) -> Path:
    if not shared.is_dir():
        raise UsageError(
            f"--workdir {shared}: no such folder (validate --via slurm needs one the GPU nodes "
            "see at the same path)"
        )
    folder = fresh_dir(shared, "validate-")
    (folder / "nodes").mkdir()
    (folder / "out").mkdir()
    return folder


def read_record(out: Path, node: str) -> tuple[list[Finding], NodeVersions | str | None] | str:
    """`node`'s findings and versions from the step's file Slurm named after it, or why there
    are none (no file, empty: the task never ran or printed nothing; not node-check's JSON; a
    finding that names another node). What the task said on stderr comes with the why,
    escaped."""
    path = out / f"{node}.json"
    if not path.exists():
        return f"no record from the Slurm step{_stderr(out, node)}"
    try:
        raw = read_input_bytes(path, _MAX_RECORD_BYTES, follow_symlinks=False)
    except UsageError as exc:
        return f"its record could not be read: {exc}"
    if not raw.strip():
        return f"an empty record from the Slurm step{_stderr(out, node)}"
    try:
        data: Any = load_json(raw, "record")
        findings = [Finding.model_validate(f) for f in data["findings"]]
    except (UsageError, ValueError, KeyError, TypeError, ValidationError) as exc:
        why = str(exc).splitlines()[0][:200]
        return f"its record is not node-check's JSON ({why!r}){_stderr(out, node)}"
    strangers = sorted({f.node for f in findings if f.node != node}, key=str)
    if strangers:
        return f"its record names other nodes ({', '.join(map(repr, strangers))}): not read"
    raw_versions = data.get("versions")
    return findings, None if raw_versions is None else versions_from_record(node, raw_versions)


def node_versions_record(node: str, transport: Transport | None = None) -> dict[str, object] | None:
    """`node-check --versions`: the version probe (and nvidia-smi -q, for the VBIOS) run on this
    node, read as `versions_record` says."""
    probes = (NvidiaSmiQ(), Versions())
    result = collect([(Target(node), probes)], transport or LocalTransport(), concurrency=1)[node]
    return versions_record(node, result.outputs) if result.reachable else None


def versions_record(node: str, outputs: dict[str, ProbeOutput]) -> dict[str, object] | None:
    """What the node runs as node-check reports it for the fleet's version checks: None when the
    version probe gave nothing (not judged, as over SSH), `{"unread": why}` when its output
    could not be read (the node's version checks are skipped with why)."""
    out = outputs.get(VERSIONS_PROBE)
    if out is None or out.rc != 0 or not out.stdout.strip():
        return None
    try:
        read = node_versions(node, outputs)
    except ParseError as exc:
        return {"unread": f"the version probe's output: {exc}"}
    return {
        "nvidia_driver": read.nvidia_driver,
        "hcas": [[h.name, h.model, h.firmware, h.psid] for h in read.hcas],
        "vbios": list(read.vbios),
        "other": dict(read.other),
    }


def _hca(row: list[object]) -> Hca:
    name, model, firmware, psid = row
    return Hca(
        str(name),
        None if model is None else str(model),
        None if firmware is None else str(firmware),
        None if psid is None else str(psid),
    )


def versions_from_record(node: str, data: object) -> NodeVersions | str:
    """A `versions_record` read back as `node`'s (the node Slurm ran the task on, whatever the
    record says), or why it is not one."""

    def text(value: object) -> str | None:
        return None if value is None else str(value)

    try:
        if not isinstance(data, dict):
            raise TypeError("not an object")
        if "unread" in data:
            return str(data["unread"])
        return NodeVersions(
            node,
            text(data["nvidia_driver"]),
            tuple(_hca(h) for h in data["hcas"]),
            tuple(text(v) for v in data["vbios"]),
            {str(k): str(v) for k, v in dict(data["other"]).items()},
        )
    except (KeyError, TypeError, ValueError) as exc:
        return f"its versions record is not one ({type(exc).__name__}: {str(exc)[:100]!r})"


def _stderr(out: Path, node: str) -> str:
    path = out / f"{node}.err"
    try:
        text = read_input_bytes(path, _MAX_RECORD_BYTES, follow_symlinks=False).decode(
            "utf-8", "replace"
        )
    except UsageError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"; it said {lines[-1][:200]!r}" if lines else ""
