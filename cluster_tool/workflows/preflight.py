"""The preflight: what a job needs from outside, checked in seconds before it starts (before a
run record, before Ansible, before a drain): the secrets the run will read, every host it will
touch reachable over SSH the way the run reaches it (in parallel, with a short timeout) and
running the OS the spec pins, each GPU node's hardware (as far as a node before bring-up shows
it) against its profile, Slurm answering the way the run will ask it, the BMCs a re-image will
use taking a connection. Every missing item in one list; exit 2 when one is the operator's input
(a secret, no Slurm client, a node unlike its profile), else 3 (a host, Slurm or a BMC that does
not answer)."""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ClusterShell.NodeSet import NodeSet

from cluster_tool.errors import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    ClusterToolError,
    ParseError,
)
from cluster_tool.findings import Finding
from cluster_tool.probes import Probe, ProbeOutput
from cluster_tool.remote.fanout import Target, Transport, TransportError, collect
from cluster_tool.slurm import SlurmAdmin, SlurmError, SlurmMissing
from cluster_tool.spec.models import Cluster

# What slurmdbd's role reads (roles/slurm/defaults/main.yml) and the playbook's preflight asks of
# it: at least 12 characters, unless a vault supplies slurm_dbd_storage_pass.
SLURMDBD_PASSWORD = "CLUSTER_TOOL_SLURMDBD_PASSWORD"
SLURMDBD_PASSWORD_MIN = 12
# A host that answers nothing is given this long to start its SSH session; all at once.
CONNECT_TIMEOUT_S = 5.0
SESSION_TIMEOUT_S = 10.0
CONCURRENCY = 64

Kind = Literal["input", "unreachable"]


@dataclass(frozen=True)
class Problem:
    """One thing the run would fail on: the operator's input to fix, or something unreachable."""

    kind: Kind
    text: str


@dataclass
class PreflightResult:
    """Every problem found, what was checked, and how long it took."""

    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # What the hardware step could not read (never a failure), and differences that do not
    # stop a run (more CPUs than the profile declares).
    not_read: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(p.kind == "input" for p in self.problems):
            return EXIT_USAGE
        return EXIT_UNREACHABLE if self.problems else EXIT_OK

    def line(self) -> str:
        """The problems as one line (the CLI's error line)."""
        return "preflight: " + "; ".join(p.text for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "pass" if not self.problems else "fail",
            "exit_code": self.exit_code,
            "problems": [{"kind": p.kind, "text": p.text} for p in self.problems],
            "checked": self.checked,
            "not_read": self.not_read,
            "warnings": self.warnings,
            "elapsed_s": self.elapsed_s,
        }


class PreflightFailed(ClusterToolError):
    """The preflight found problems: the job did not start."""

    def __init__(self, result: PreflightResult) -> None:
        self.result = result
        self.exit_code = result.exit_code
        super().__init__(result.line())


def ssh_transport(cluster: Cluster, ssh_config: Path | None) -> Transport:
    """SSH as the run's own collections reach the hosts (its ssh config, the cluster's
    known_hosts), giving up on a host after CONNECT_TIMEOUT_S."""
    from cluster_tool.remote.fanout import OpenSshTransport
    from cluster_tool.remote.known_hosts import KnownHosts

    known = KnownHosts.for_cluster(cluster.name)
    return OpenSshTransport(ssh_config, connect_timeout=CONNECT_TIMEOUT_S, known_hosts=known)


def secret_problems(cluster: Cluster, environ: Mapping[str, str]) -> list[Problem]:
    """The secrets a converge reads that are missing or too short, by name (never their
    values)."""
    problems = []
    dbd = cluster.slurm.accounting_host
    if dbd and "slurm_dbd_storage_pass" not in cluster.ansible_vars:
        value = environ.get(SLURMDBD_PASSWORD, "")
        if len(value) < SLURMDBD_PASSWORD_MIN:
            what = "unset" if not value else f"{len(value)} characters"
            problems.append(
                Problem(
                    "input",
                    f"{SLURMDBD_PASSWORD} is {what}: slurmdbd on {dbd} needs a password of "
                    f"{SLURMDBD_PASSWORD_MIN}+ characters (or slurm_dbd_storage_pass from a "
                    "vault in the spec's ansible_vars)",
                )
            )
    return problems


class OsRelease(Probe):
    """The OS a host runs (every host that lets us in has the file)."""

    name = "os-release"
    what = "/etc/os-release"

    def command(self) -> str:
        return "cat /etc/os-release"


# What a GPU node shows of its hardware before bring-up installs anything (no driver, no
# DOCA): the PCI bus (GPUs, HCAs), the kernel's RDMA devices (the inbox mlx5 driver, if
# loaded), CPUs and memory. Each bounded: a hung tool is "not read", not a host down.
HARDWARE_TIMEOUT_S = 5


def hardware_probes() -> list[Probe]:
    from cluster_tool.probes.host import Ibdev2netdev, Lscpu, Meminfo, RdmaDevices
    from cluster_tool.probes.node import Lspci

    probes: list[Probe] = [Lspci(), Ibdev2netdev(), RdmaDevices(), Lscpu(), Meminfo()]
    for probe in probes:
        probe.timeout_s = HARDWARE_TIMEOUT_S
    return probes


def ssh_round(
    targets: Sequence[Target],
    transport: Transport,
    timeout_s: float = SESSION_TIMEOUT_S,
    hardware: Collection[str] = (),
) -> tuple[dict[str, str], dict[str, dict[str, ProbeOutput]]]:
    """One SSH session per target, all at once (the whole round takes one timeout, not one per
    host), asking each its /etc/os-release and the `hardware` nodes their hardware too: host ->
    why for those that did not answer, host -> probe outputs for those that did."""
    jobs = [(t, [OsRelease(), *(hardware_probes() if t.name in hardware else ())]) for t in targets]
    results = collect(jobs, transport, concurrency=CONCURRENCY, timeout=timeout_s)
    down = {name: r.error or "no answer" for name, r in results.items() if not r.outputs}
    return down, {name: dict(r.outputs) for name, r in results.items() if r.outputs}


def os_problems(cluster: Cluster, releases: Mapping[str, str | None]) -> list[Problem]:
    """Hosts whose /etc/os-release is not the OS the spec says they run, both named, grouped by
    what they run; a host whose file cannot be read is named too."""
    from cluster_tool.parsers.os_release import parse_os_release

    wanted = {h.name: h.os for h in cluster.hosts() if h.os}
    by_pair: dict[tuple[str, str], list[str]] = {}
    for host, text in releases.items():
        if host not in wanted or text is None:
            continue
        try:
            release = parse_os_release(text)
        except ParseError as exc:
            by_pair.setdefault((f"an unreadable /etc/os-release ({exc})", wanted[host]), []).append(
                host
            )
            continue
        if release.spec_name != wanted[host]:
            by_pair.setdefault((release.shown(), wanted[host]), []).append(host)
    return [
        Problem(
            "input",
            f"{NodeSet.fromlist(hosts)} {'runs' if not seen.startswith('an ') else 'has'} "
            f"{seen}; the spec says {expected}",
        )
        for (seen, expected), hosts in by_pair.items()
    ]


# Why a hardware probe gave no reading, from how it ended.
def _why_unread(output: ProbeOutput | None, what: str) -> str:
    if output is None:
        return f"{what}: not asked"
    if output.not_installed:
        return f"{what}: not installed"
    if output.rc in (124, 137):
        return f"{what}: no answer in {HARDWARE_TIMEOUT_S} s"
    if output.rc != 0:
        last = (output.stderr.strip().splitlines() or [f"exit {output.rc}"])[-1]
        # Node text: bounded here, escaped where it is shown (cluster_tool.output).
        return f"{what}: {last[:160]}"
    return f"{what}: printed nothing"


def _difference(finding: Finding, hint: str) -> str:
    """A mismatch without its node (the group's hostlist names the nodes) and without the
    per-node hint (the group's line gives one)."""
    core = finding.message.removesuffix(f"; {hint}")
    core = core.removeprefix(f"{finding.node} {finding.component}: ")
    component = finding.component or ""
    return core if component in core else f"{component}: {core}"


@dataclass
class HardwareResult:
    """The GPU nodes held to their profiles: the contradictions (exit 2), and what could not be
    read on them (a bare node has no nvidia-smi, maybe no lspci or RDMA devices yet)."""

    problems: list[Problem] = field(default_factory=list)
    not_read: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    held: dict[str, list[str]] = field(default_factory=dict)  # profile -> nodes compared
    read_any: bool = False  # whether any node showed anything to compare


def hardware_problems(
    cluster: Cluster, outputs: Mapping[str, Mapping[str, ProbeOutput]], spec: str = "SPEC"
) -> HardwareResult:
    """Each GPU node's hardware, as far as a node before bring-up shows it, held to the profile
    the spec assigns it by `profile discover --diff`'s comparison (checks/profile.py). Nodes
    with the same differences are one line (a hostlist), as `clush -b` groups output."""
    from cluster_tool.checks.profile import diff_profile, discover, remake_hint
    from cluster_tool.probes.host import Ibdev2netdev, Lscpu, Meminfo, RdmaDevices
    from cluster_tool.probes.node import Lspci
    from cluster_tool.workflows.discover import facts_from_outputs

    result = HardwareResult()
    errors: dict[tuple[str | None, tuple[str, ...]], list[str]] = {}
    warnings: dict[tuple[str, ...], list[str]] = {}
    unread: dict[str, list[str]] = {}
    for node in cluster.gpu_nodes():
        probes = outputs.get(node.name)
        if probes is None or node.profile is None:
            continue
        result.held.setdefault(node.profile_name or "?", []).append(node.name)
        unreadable: dict[str, str] = {}
        facts = facts_from_outputs(node.name, probes, unreadable)
        for name, why in unreadable.items():
            unread.setdefault(f"{name}: unreadable ({why})", []).append(node.name)
        if facts.lspci is None and Lspci.name not in unreadable:
            why = _why_unread(probes.get(Lspci.name), "lspci")
            unread.setdefault(f"GPU and HCA PCI addresses ({why})", []).append(node.name)
        if facts.rdma is None and not {Ibdev2netdev.name, RdmaDevices.name} & set(unreadable):
            # No DOCA yet, and no inbox mlx5_ib loaded: /sys/class/infiniband is empty.
            unread.setdefault(
                "RDMA device names (no ibdev2netdev, /sys/class/infiniband empty)", []
            ).append(node.name)
        if facts.cpu is None and Lscpu.name not in unreadable:
            why = _why_unread(probes.get(Lscpu.name), "lscpu")
            unread.setdefault(f"CPUs ({why})", []).append(node.name)
        if facts.mem_total_mib is None and Meminfo.name not in unreadable:
            why = _why_unread(probes.get(Meminfo.name), "/proc/meminfo")
            unread.setdefault(f"memory ({why})", []).append(node.name)
        result.read_any = result.read_any or any(
            x is not None for x in (facts.lspci, facts.rdma, facts.cpu, facts.mem_total_mib)
        )
        findings = diff_profile(node.profile, facts, discover(facts))
        said = tuple(
            _difference(f, remake_hint(node.name)) for f in findings if f.severity == "error"
        )
        if said:
            errors.setdefault((node.profile_name, said), []).append(node.name)
        noted = tuple(
            _difference(f, remake_hint(node.name)) for f in findings if f.severity != "error"
        )
        if noted:
            warnings.setdefault(noted, []).append(node.name)
    for (profile, said), nodes in errors.items():
        hosts = NodeSet.fromlist(nodes)
        first = nodes[0]
        result.problems.append(
            Problem(
                "input",
                f"{hosts} (profile {profile}): {'; '.join(said)} (a matching profile: "
                f"`cluster-tool profile discover {spec} --node {first} --out {first}.yml`, "
                "once nvidia-smi can name the GPU model)",
            )
        )
    result.warnings = [f"{NodeSet.fromlist(n)}: {'; '.join(w)}" for w, n in warnings.items()]
    result.not_read = [f"{what} on {NodeSet.fromlist(n)}" for what, n in unread.items()]
    return result


def _unreachable_problems(down: Mapping[str, str]) -> list[Problem]:
    by_why: dict[str, list[str]] = {}
    for host, why in down.items():
        by_why.setdefault(why, []).append(host)
    if len(by_why) > 3:  # each its own address or port: the hosts matter, not the words
        return [Problem("unreachable", f"unreachable over SSH: {NodeSet.fromlist(list(down))}")]
    return [
        Problem("unreachable", f"unreachable over SSH: {NodeSet.fromlist(hosts)} ({why})")
        for why, hosts in by_why.items()
    ]


def shared_folder_problems(
    folder: Path, node: Target, transport: Transport, timeout_s: float = SESSION_TIMEOUT_S
) -> list[Problem]:
    """The gate's folder, written here and read back on `node`: the gate's job scripts are
    written on this controller and run on the nodes, which write their outputs back. A folder
    that is not there, or that the node sees without this file, is the site's setup to fix."""
    import secrets
    import shlex

    if not folder.is_dir():
        return [Problem("input", f"the gate's folder {folder} is not a folder on this controller")]
    token = secrets.token_hex(8)
    probe = folder / f".cluster-tool-preflight-{token}"
    try:
        probe.write_text(token + "\n")
    except OSError as exc:
        return [Problem("input", f"the gate's folder {folder}: cannot write here: {exc.strerror}")]
    try:
        rc, out, _ = transport.run(node, f"cat -- {shlex.quote(str(probe))}\n", timeout_s)
    except TransportError as exc:
        return [Problem("unreachable", f"the gate's folder: {node.name} did not answer: {exc}")]
    finally:
        probe.unlink(missing_ok=True)
    if rc != 0 or out.decode("utf-8", "replace").strip() != token:
        return [
            Problem(
                "input",
                f"the gate's folder {folder} is not shared with {node.name}: a file written "
                "here is not there (mount it on the nodes at the same path, or give --workdir)",
            )
        ]
    return []


def bmc_unanswered(urls: Mapping[str, str]) -> dict[str, str]:
    """The BMCs among `urls` (node -> URL) that take no connection (tests hand a fake)."""
    from cluster_tool.bmc.redfish import unanswered

    return unanswered(urls, CONNECT_TIMEOUT_S)


def run_preflight(
    cluster: Cluster,
    hosts: Sequence[str],
    transport: Transport | None,
    *,
    slurm: SlurmAdmin | None = None,
    bmcs: Mapping[str, str] | None = None,
    shared: Path | None = None,
    environ: Mapping[str, str] | None = None,
    secrets: bool = True,
    hardware: bool = True,
    spec: str = "SPEC",
) -> PreflightResult:
    """Check the secrets (a converge's, when `secrets`), SSH to `hosts` (none when `transport`
    is None), the gate's `shared` folder from the first GPU node that answered, Slurm (when
    given) and the BMCs (node -> URL, when given); with `hardware`, each GPU node's hardware
    against its profile (`spec` names the spec in the command a mismatch suggests). Every
    problem in one result."""
    started = time.monotonic()
    result = PreflightResult()
    if secrets:
        result.problems += secret_problems(cluster, os.environ if environ is None else environ)
        result.checked["secrets"] = "missing" if result.problems else "ok"
    if transport is not None:
        address = {h.name: h.address for h in cluster.hosts()}
        targets = [Target(h, address.get(h)) for h in hosts]
        profiled = {n.name for n in cluster.gpu_nodes() if n.profile is not None}
        down, answers = ssh_round(targets, transport, hardware=profiled if hardware else ())
        result.problems += _unreachable_problems(down)
        releases = {
            host: (out["os-release"].stdout if out["os-release"].rc == 0 else "")
            if "os-release" in out
            else None
            for host, out in answers.items()
        }
        result.problems += os_problems(cluster, releases)
        result.checked["ssh"] = f"{len(targets) - len(down)} of {len(targets)} hosts answered"
        if hardware:
            held = hardware_problems(cluster, answers, spec)
            result.problems += held.problems
            result.not_read = held.not_read
            result.warnings = held.warnings
            if held.held:
                if held.problems:
                    state = "differs"
                elif not held.read_any:
                    state = "nothing read"
                else:
                    state = "matches" + (" as far as read" if held.not_read else "")
                compared = ", ".join(
                    f"{NodeSet.fromlist(nodes)} against profile {name}"
                    for name, nodes in held.held.items()
                )
                result.checked["hardware"] = f"{compared}: {state}"
        gpu_names = {n.name for n in cluster.gpu_nodes()}
        reader = next((t for t in targets if t.name in gpu_names and t.name not in down), None)
        if shared is not None and reader is not None:
            problems = shared_folder_problems(shared, reader, transport)
            result.problems += problems
            result.checked["gate folder"] = (
                f"{shared} shared with {reader.name}" if not problems else "not shared"
            )
    if slurm is not None:
        gpu = [n.name for n in cluster.gpu_nodes()]
        try:
            known = {s.name for s in slurm.node_states(None)} & set(gpu)
        except SlurmMissing as exc:
            result.problems.append(Problem("input", f"Slurm: {exc}"))
            result.checked["slurm"] = "no client"
        except SlurmError as exc:
            result.problems.append(Problem("unreachable", f"Slurm: {exc}"))
            result.checked["slurm"] = "no answer"
        else:
            result.checked["slurm"] = f"{len(known)} of {len(gpu)} GPU nodes known to Slurm"
    if bmcs:
        down = bmc_unanswered(bmcs)
        if down:
            whys = set(down.values())
            why = f" ({whys.pop()})" if len(whys) == 1 else ""
            result.problems.append(
                Problem("unreachable", f"BMC unreachable: {NodeSet.fromlist(list(down))}{why}")
            )
        result.checked["bmc"] = f"{len(bmcs) - len(down)} of {len(bmcs)} BMCs answered"
    result.elapsed_s = round(time.monotonic() - started, 2)
    return result
